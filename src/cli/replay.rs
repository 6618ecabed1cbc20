//! `ctxd replay TURN --input k=v … [--config F | --store PATH] [--tenant T]`: reproduce a
//! recorded turn from the trace store alone — no provider is contacted, nothing is
//! written. Exit 0 when the replay is exact and renders the recorded digest, 1 when it
//! is not, 2 on errors.

use super::output::{printable, yes_no};
use super::store::{self, StoreArgs, digest_key};
use crate::config::EnvVars;
use crate::digest::DigestKey;
use crate::trace::store::TraceReader;
use crate::turn::replay::{ReplayResult, replay_from_store};
use anyhow::Context;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The id of the turn to replay
    pub(crate) turn: String,
    /// An input of the original turn as KEY=VALUE; give every input the turn had
    #[arg(long = "input", value_name = "KEY=VALUE")]
    pub(crate) inputs: Vec<String>,
    /// Server config naming the trace store and the digest key [default: config/ctxd.toml]
    #[arg(long, conflicts_with = "store")]
    pub(crate) config: Option<PathBuf>,
    /// The trace store (a SQLite file, `sqlite:` prefix optional); the digest key is then
    /// CTXD_DIGEST_KEY, or the generated key kept beside the store
    #[arg(long)]
    pub(crate) store: Option<PathBuf>,
    /// Replay only a turn of this tenant
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// `human`: what was reproduced, provider by provider; `json`: the replay result as
    /// the replay API answers it
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub(crate) format: Format,
}

pub(crate) use super::HumanOrJson as Format;

pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let inputs = super::parse_inputs(&args.inputs)?;
    let env = EnvVars::from_process();
    let postgres =
        super::store::postgres_of_config(args.store.is_some(), args.config.as_deref(), &env)?;
    let (reader, key) = match postgres {
        Some((target, key_source)) => {
            let key = digest_key(&key_source, &env)?;
            let reader = TraceReader::open_postgres(&target, Some(&key))
                .context("cannot open the trace store")?;
            (reader, key)
        }
        None => {
            let (store, key) = locate(args, &env)?;
            let reader = TraceReader::open(&store, Some(&key)).with_context(|| {
                format!("cannot open the trace store {}", super::shown_path(&store))
            })?;
            (reader, key)
        }
    };
    // Replay errors name the turn, the input key or the provider themselves.
    let result = replay_from_store(&reader, args.tenant.as_deref(), &args.turn, &inputs, &key)?;
    match args.format {
        Format::Json => super::print_json(&result)?,
        Format::Human => super::print(&human(&result))?,
    }
    Ok(if result.reproduced() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Where the trace store is and the digest key its records were written with.
fn locate(args: &ReplayArgs, env: &EnvVars) -> anyhow::Result<(PathBuf, DigestKey)> {
    let location = StoreArgs {
        config: args.config.clone(),
        store: args.store.clone(),
    };
    let (store, key_source) = store::locate(&location, "replay reads it through store_env")?;
    let key = digest_key(&key_source, env)?;
    Ok((store, key))
}

fn human(result: &ReplayResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "turn {}", printable(&result.turn_id));
    let _ = writeln!(out, "exact: {}", yes_no(result.exact));
    let _ = writeln!(
        out,
        "rendered digest matches: {}",
        yes_no(result.rendered_digest_matches)
    );
    let digest = |d: &Option<String>| d.clone().unwrap_or_else(|| "none (blocked)".to_owned());
    let _ = writeln!(out, "  replayed {}", digest(&result.rendered_digest));
    let _ = writeln!(
        out,
        "  recorded {}",
        digest(&result.original_rendered_digest)
    );
    let _ = writeln!(
        out,
        "blocked: {} (recorded: {})",
        yes_no(result.blocked),
        yes_no(result.original_blocked)
    );
    if !result.providers.is_empty() {
        let _ = writeln!(out, "\nproviders:");
        for provider in &result.providers {
            let detail = provider
                .detail
                .as_deref()
                .map(|d| format!(" detail={}", printable(d)))
                .unwrap_or_default();
            let recorded = match provider.original_status {
                Some(original) if original != provider.status => {
                    format!(" (recorded {original})")
                }
                _ => String::new(),
            };
            let line = format!(
                "  {:<24} {:<28} {:<16}{detail}{recorded}",
                printable(&provider.id),
                provider.replay.as_str(),
                provider.status.as_str(),
            );
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    let _ = writeln!(out, "\nlayers:");
    for layer in &result.layers {
        let changed = match layer.original_status {
            Some(original) if original != layer.status => format!(" (recorded {original})"),
            Some(_) => String::new(),
            None => " (not recorded)".to_owned(),
        };
        let _ = writeln!(
            out,
            "  {:<24} {:<14} {}{changed}",
            printable(&layer.id),
            layer.status.as_str(),
            layer.reason,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::store::DEFAULT_DIGEST_KEY_ENV;
    use crate::cli::{Cli, Command};
    use crate::contract::{LayerReason, LayerStatus, ProviderStatus};
    use crate::digest::keyed::GENERATED_KEY_FILE;
    use crate::turn::replay::{ProviderReplay, ReplayedLayer, ReplayedProvider};
    use clap::Parser;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<ReplayArgs, clap::Error> {
        let mut argv = vec!["ctxd", "replay"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Replay(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn args(store: &Path) -> ReplayArgs {
        parse(&["t-1", "--store", store.to_str().unwrap()]).unwrap()
    }

    #[test]
    fn arguments_parse() {
        let args = parse(&[
            "0190-turn",
            "--input",
            "customerId=CUST-1042",
            "--input",
            "region=eu",
            "--tenant",
            "acme",
            "--format",
            "json",
        ])
        .unwrap();
        assert_eq!(args.turn, "0190-turn");
        assert_eq!(args.inputs, ["customerId=CUST-1042", "region=eu"]);
        assert_eq!(args.tenant.as_deref(), Some("acme"));
        assert_eq!(args.format, Format::Json);
        assert_eq!((args.config, args.store), (None, None));
        assert!(parse(&[]).is_err(), "the turn id is required");
    }

    #[test]
    fn inputs_parse_as_key_value_pairs() {
        let given = |list: &[&str]| {
            let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            crate::cli::parse_inputs(&list)
        };
        let map = given(&["customerId=CUST-1042", "note=a=b", "empty="]).unwrap();
        assert_eq!(map["customerId"], "CUST-1042");
        assert_eq!(map["note"], "a=b", "only the first = splits");
        assert_eq!(map["empty"], "");
        assert!(given(&["customerId"]).is_err());
        assert!(given(&["=CUST-1042"]).is_err());
        let twice = given(&["k=1", "k=2"]).unwrap_err().to_string();
        assert_eq!(twice, "--input k: given twice");
    }

    #[test]
    fn config_and_store_exclude_each_other() {
        let error = parse(&["t", "--config", "c.toml", "--store", "s.db"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn the_store_may_carry_its_scheme() {
        assert_eq!(
            crate::cli::store_file(Path::new("sqlite:data/traces.db")),
            PathBuf::from("data/traces.db")
        );
        assert_eq!(
            crate::cli::store_file(Path::new("/var/ctxd/traces.db")),
            PathBuf::from("/var/ctxd/traces.db")
        );
    }

    #[test]
    fn a_missing_store_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("traces.db");
        let error = locate(&args(&store), &EnvVars::default()).unwrap_err();
        assert!(error.to_string().contains("does not exist"), "{error}");
        assert!(!store.exists(), "nothing is created");
    }

    #[test]
    fn the_key_comes_from_the_env_or_the_kept_file_and_is_never_created() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("traces.db");
        std::fs::write(&store, b"").unwrap();

        let error = locate(&args(&store), &EnvVars::default()).unwrap_err();
        assert!(error.to_string().contains("no digest key"), "{error}");
        assert!(!dir.path().join(GENERATED_KEY_FILE).exists());

        let secret = "k".repeat(32);
        let env: EnvVars = [(DEFAULT_DIGEST_KEY_ENV, secret.as_str())]
            .into_iter()
            .collect();
        let (found, key) = locate(&args(&store), &env).unwrap();
        assert_eq!(found, store);
        let expected = DigestKey::from_bytes(secret.into_bytes()).unwrap();
        assert_eq!(key.locator("p", "1"), expected.locator("p", "1"));

        let kept = "f".repeat(64);
        std::fs::write(dir.path().join(GENERATED_KEY_FILE), &kept).unwrap();
        let (_, key) = locate(&args(&store), &EnvVars::default()).unwrap();
        let expected = DigestKey::from_bytes(kept.into_bytes()).unwrap();
        assert_eq!(key.locator("p", "1"), expected.locator("p", "1"));
    }

    #[test]
    fn the_config_names_the_store_and_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ctxd.toml");
        std::fs::write(
            &config,
            concat!(
                "[trace]\nstore = \"sqlite:data/traces.db\"\ndigest_key_env = \"REPLAY_KEY\"\n",
                "[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n",
                "[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n",
            ),
        )
        .unwrap();
        let store = dir.path().join("data/traces.db");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        std::fs::write(&store, b"").unwrap();
        let args = parse(&["t-1", "--config", config.to_str().unwrap()]).unwrap();

        let error = locate(&args, &EnvVars::default()).unwrap_err();
        assert!(error.to_string().contains("REPLAY_KEY"), "{error}");
        let env: EnvVars = [("REPLAY_KEY", "r".repeat(32))].into_iter().collect();
        let (found, _) = locate(&args, &env).unwrap();
        assert_eq!(found, store);
    }

    #[test]
    fn human_output_says_exact_match_and_each_provider_and_layer() {
        let result = ReplayResult {
            turn_id: "t-1".to_owned(),
            exact: false,
            rendered_digest_matches: false,
            rendered_digest: None,
            original_rendered_digest: Some("sha256:abc".to_owned()),
            blocked: true,
            original_blocked: false,
            layers: vec![ReplayedLayer {
                id: "customer-profile".to_owned(),
                status: LayerStatus::Unknown,
                reason: LayerReason::NotEvaluated,
                original_status: Some(LayerStatus::Included),
                original_reason: Some(LayerReason::ProviderItems),
            }],
            providers: vec![ReplayedProvider {
                id: "customer-data".to_owned(),
                replay: ProviderReplay::LiveDependencyUnavailable,
                status: ProviderStatus::NotEvaluated,
                detail: Some("LIVE_DEPENDENCY_UNAVAILABLE".to_owned()),
                original_status: Some(ProviderStatus::Ok),
            }],
            rendered: None,
        };
        let text = human(&result);
        assert!(text.contains("exact: no\n"), "{text}");
        assert!(text.contains("rendered digest matches: no\n"), "{text}");
        assert!(text.contains("recorded sha256:abc"), "{text}");
        assert!(text.contains("blocked: yes (recorded: no)"), "{text}");
        let provider = text.lines().find(|l| l.contains("customer-data")).unwrap();
        assert!(
            provider.contains("LIVE_DEPENDENCY_UNAVAILABLE"),
            "{provider}"
        );
        assert!(provider.contains("(recorded OK)"), "{provider}");
        let layer = text
            .lines()
            .find(|l| l.contains("customer-profile"))
            .unwrap();
        assert!(layer.contains("UNKNOWN"), "{layer}");
        assert!(layer.contains("(recorded INCLUDED)"), "{layer}");
    }

    #[test]
    fn human_output_spells_reasons_as_the_api_and_escapes_stored_text() {
        let result = ReplayResult {
            turn_id: "t-1\nexact: yes".to_owned(),
            exact: false,
            rendered_digest_matches: true,
            rendered_digest: None,
            original_rendered_digest: None,
            blocked: false,
            original_blocked: false,
            layers: vec![ReplayedLayer {
                id: "profile\u{1b}[2J".to_owned(),
                status: LayerStatus::Included,
                reason: LayerReason::ProviderItems,
                original_status: Some(LayerStatus::Included),
                original_reason: Some(LayerReason::ProviderItems),
            }],
            providers: vec![ReplayedProvider {
                id: "crm".to_owned(),
                replay: ProviderReplay::Exact,
                status: ProviderStatus::Timeout,
                detail: Some("DEADLINE\u{2028}blocked: no".to_owned()),
                original_status: Some(ProviderStatus::Timeout),
            }],
            rendered: None,
        };
        let text = human(&result);
        assert!(text.contains("PROVIDER_ITEMS"), "{text}");
        assert!(!text.contains("ProviderItems"), "{text}");
        assert!(
            text.starts_with("turn t-1\\nexact: yes\nexact: no\n"),
            "{text}"
        );
        assert!(text.contains("profile\\u{1b}[2J"), "{text}");
        assert!(
            text.contains("detail=DEADLINE\\u{2028}blocked: no"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{2028}'),
            "{text}"
        );
    }
}
