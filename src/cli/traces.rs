//! `ctxd traces search …` and `ctxd traces show TURN`: read the trace store directly and
//! read-only, as an operator. Without `--tenant` they see every tenant. The store is
//! `[trace] store` of the server config, or `--store PATH`. Records hold digests and
//! retained content is never shown, so only paging needs the digest key: search cursors
//! are sealed with it, as the API's are (the key as `replay` finds it; without it a
//! search shows its first page and says that more follow).
//!
//! Tables fit the terminal (`$COLUMNS`, else 100 columns): a table wider than that is
//! printed as one record per row, and long values wrap. Every stored string is escaped
//! (`output::printable`): a caller's objective cannot forge lines or clear the screen.

use super::output::{printable, serde_name, table, terminal_width, wrap, yes_no};
use super::store::{PRUNE_IS_SQLITE_ONLY, StoreArgs, digest_key, locate, postgres_location};
use crate::config::EnvVars;
use crate::contract::{LayerStatus, ProviderStatus};
use crate::trace::query::{DEFAULT_LIMIT, MAX_LIMIT, SearchPage, SearchQuery, parse_time};
use crate::trace::record::{ProviderRecord, StoredTurn, TurnRecord};
use crate::trace::store::{StoreError, TraceReader};
use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Width of the labels of `show` (the longest is `lookup key`).
const LABEL_WIDTH: usize = 10;

#[derive(Debug, Args)]
pub(crate) struct TracesArgs {
    #[command(subcommand)]
    pub(crate) command: TracesCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TracesCommand {
    /// Find turns by provider, provider status, layer, layer status and start time,
    /// newest first
    Search(SearchArgs),
    /// Print one turn's record and all its provider records
    Show(ShowArgs),
    /// Delete turn records (with their provider records) and handle operations that
    /// started before a time, oldest first, in small transactions beside a running server
    Prune(super::prune::PruneArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    #[command(flatten)]
    pub(crate) location: StoreArgs,
    /// Only this tenant's turns (default: every tenant)
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Turns that reached this provider
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Turns with a provider record of this status (with --provider: that provider's)
    #[arg(long, value_name = "STATUS", value_parser = parse_provider_status)]
    pub(crate) provider_status: Option<ProviderStatus>,
    /// Turns with a decision for this layer
    #[arg(long)]
    pub(crate) layer: Option<String>,
    /// Turns with a layer decision of this status (with --layer: that layer's)
    #[arg(long, value_name = "STATUS", value_parser = parse_layer_status)]
    pub(crate) status: Option<LayerStatus>,
    /// Turns started at or after TIME (RFC 3339, e.g. 2026-11-30T10:00:00Z, or
    /// milliseconds since the epoch)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) since: Option<i64>,
    /// Turns started before TIME (RFC 3339 or milliseconds since the epoch)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) until: Option<i64>,
    /// Turns per page
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT as u16,
          value_parser = clap::value_parser!(u16).range(1..=MAX_LIMIT as i64))]
    pub(crate) limit: u16,
    /// The next page: the cursor printed after the previous one, with the same filters
    /// (it needs the digest key, as for `replay`)
    #[arg(long)]
    pub(crate) cursor: Option<String>,
    /// `table`: one line per turn; `json`: the page of traces with `nextCursor`, as
    /// `GET /v1/traces` answers it
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The turn id
    pub(crate) turn: String,
    #[command(flatten)]
    pub(crate) location: StoreArgs,
    /// Show the turn only if it belongs to this tenant
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// `table`: the turn's layers, providers and selections; `json`: the stored trace
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
}

pub(crate) fn run(args: &TracesArgs) -> anyhow::Result<ExitCode> {
    run_with(args, &EnvVars::from_process(), &mut super::stdout())
}

/// Runs the subcommand in the environment `env`, writing its output to `out`.
pub(crate) fn run_with(
    args: &TracesArgs,
    env: &EnvVars,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    match &args.command {
        TracesCommand::Search(search) => run_search(search, env, out),
        TracesCommand::Show(show) => run_show(show, env, out),
        TracesCommand::Prune(prune) => super::prune::run(prune, out),
    }
}

fn run_search(args: &SearchArgs, env: &EnvVars, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since >= until
    {
        bail!("--since {since} is not before --until {until}: the window is empty");
    }
    let (reader, no_key) = open(&args.location, env, true)?;
    if let (Some(cursor), Some(why)) = (&args.cursor, &no_key) {
        bail!("--cursor {cursor:?}: paging needs the digest key the cursor was sealed with: {why}");
    }
    let query = SearchQuery {
        tenant: args.tenant.clone(),
        provider: args.provider.clone(),
        provider_status: args.provider_status,
        layer: args.layer.clone(),
        layer_status: args.status,
        since_ms: args.since,
        until_ms: args.until,
        limit: usize::from(args.limit),
        cursor: args.cursor.clone(),
    };
    let page = reader.search(&query).map_err(|error| match error {
        StoreError::InvalidCursor => anyhow!(
            "--cursor {:?}: {error}",
            args.cursor.as_deref().unwrap_or_default()
        ),
        other => anyhow!(other),
    })?;
    // More results, but no key to seal their cursor with: say so, and why.
    let unpaged = no_key.filter(|_| page.more && page.next_cursor.is_none());
    match args.format {
        Format::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&page)?)?;
            if let Some(why) = &unpaged {
                eprintln!("more results follow; paging needs the digest key: {why}");
            }
        }
        Format::Table => {
            out.write_all(search_table(&page, terminal_width(env)).as_bytes())?;
            if let Some(why) = &unpaged {
                writeln!(
                    out,
                    "more results follow; paging needs the digest key: {why}"
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_show(args: &ShowArgs, env: &EnvVars, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let (reader, _) = open(&args.location, env, false)?;
    let Some(stored) = reader.turn(args.tenant.as_deref(), &args.turn)? else {
        match &args.tenant {
            Some(tenant) => bail!(
                "turn {:?} of tenant {tenant:?} is not in the trace store {}",
                args.turn,
                super::shown_path(reader.path())
            ),
            None => bail!(
                "turn {:?} is not in the trace store {}",
                args.turn,
                super::shown_path(reader.path())
            ),
        }
    };
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&stored)?)?,
        Format::Table => out.write_all(show_table(&stored, terminal_width(env)).as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens the store read-only: `--store`, else `[trace] store` of the config. With `env`,
/// with the store's digest key too when this machine has it; the second value says why
/// it does not.
fn open(
    location: &StoreArgs,
    env: &EnvVars,
    with_key: bool,
) -> anyhow::Result<(TraceReader, Option<String>)> {
    let postgres = postgres_location(location, env)?;
    let key_source = match &postgres {
        Some((_, key_source)) => key_source.clone(),
        None => locate(location, PRUNE_IS_SQLITE_ONLY)?.1,
    };
    let key = match with_key.then(|| digest_key(&key_source, env)) {
        Some(Ok(key)) => Ok(Some(key)),
        Some(Err(why)) => Err(format!("{why:#}")),
        None => Ok(None),
    };
    let usable_key = key.as_ref().ok().and_then(Option::as_ref);
    let reader = match &postgres {
        Some((target, _)) => TraceReader::open_postgres(target, usable_key),
        None => TraceReader::open(&locate(location, PRUNE_IS_SQLITE_ONLY)?.0, usable_key),
    }
    .context("cannot read traces")?;
    Ok((reader, key.err()))
}

fn parse_provider_status(text: &str) -> Result<ProviderStatus, String> {
    ProviderStatus::ALL
        .into_iter()
        .find(|status| status.as_str().eq_ignore_ascii_case(text))
        .ok_or_else(|| {
            let names: Vec<&str> = ProviderStatus::ALL.map(ProviderStatus::as_str).to_vec();
            format!("not a provider status; use one of {}", names.join(", "))
        })
}

fn parse_layer_status(text: &str) -> Result<LayerStatus, String> {
    LayerStatus::ALL
        .into_iter()
        .find(|status| status.as_str().eq_ignore_ascii_case(text))
        .ok_or_else(|| {
            let names: Vec<&str> = LayerStatus::ALL.map(LayerStatus::as_str).to_vec();
            format!("not a layer status; use one of {}", names.join(", "))
        })
}

fn search_table(page: &SearchPage, width: usize) -> String {
    if page.traces.is_empty() {
        return "no traces match\n".to_owned();
    }
    let mut rows = vec![
        [
            "STARTED AT",
            "TURN",
            "TENANT",
            "PROJECT",
            "BLOCKED",
            "PROVIDERS",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for stored in &page.traces {
        let turn = &stored.turn;
        let providers: Vec<String> = stored
            .providers
            .iter()
            .map(|p| format!("{}={}", p.provider, p.status))
            .collect();
        rows.push(vec![
            turn.started_at.clone(),
            turn.turn_id.clone(),
            turn.tenant.clone(),
            turn.project.clone(),
            yes_no(turn.blocked).to_owned(),
            providers.join(" "),
        ]);
    }
    let mut out = table(&rows, "", width);
    match &page.next_cursor {
        Some(cursor) => out.push_str(&format!("next page: --cursor {cursor}\n")),
        None => out.push_str("no more results\n"),
    }
    out
}

/// One turn for people, within `width` columns.
fn show_table(stored: &StoredTurn, width: usize) -> String {
    let mut out = turn_section(&stored.turn, width);
    out.push_str("\nproviders\n");
    if stored.providers.is_empty() {
        out.push_str("  (none reached)\n");
    }
    for provider in &stored.providers {
        out.push_str(&provider_section(provider, width));
    }
    out
}

fn turn_section(turn: &TurnRecord, width: usize) -> String {
    let optional = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
    let mut facts = vec![
        ("tenant", turn.tenant.clone()),
        (
            "project",
            format!("{} {}", turn.project, turn.project_version),
        ),
        ("build", turn.build_digest.clone()),
    ];
    if turn.binding_revision.is_some() || turn.binding_digest.is_some() {
        facts.push((
            "binding",
            format!(
                "{} {}",
                optional(&turn.binding_revision),
                optional(&turn.binding_digest)
            ),
        ));
    }
    facts.extend([
        ("profile", turn.profile.clone()),
        ("objective", optional(&turn.objective)),
        ("consumer", optional(&turn.consumer)),
        ("mode", turn.mode.as_str().to_owned()),
        ("started at", turn.started_at.clone()),
        (
            "duration",
            format!("{} ms (deadline {} ms)", turn.duration_ms, turn.deadline_ms),
        ),
        (
            "blocked",
            if turn.blocked {
                format!("yes, by {}", turn.blocking_layers.join(", "))
            } else {
                "no".to_owned()
            },
        ),
        (
            "rendered",
            format!(
                "{} of {} bytes, {}",
                turn.rendered_bytes,
                turn.budget_max_bytes,
                optional(&turn.rendered_digest)
            ),
        ),
    ]);
    for input in &turn.inputs {
        facts.push(("input", format!("{} {}", input.key, input.digest)));
    }
    let mut out = format!("turn {}\n", printable(&turn.turn_id));
    out.push_str(&labelled(&facts, "  ", width));

    out.push_str("\nlayers\n");
    if turn.layers.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let mut rows = vec![
            [
                "LAYER",
                "STATUS",
                "REASON",
                "REQUIRED",
                "PROVIDERS",
                "MISSING INPUTS",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for layer in &turn.layers {
            rows.push(vec![
                layer.id.clone(),
                layer.status.as_str().to_owned(),
                layer.reason.as_str().to_owned(),
                yes_no(layer.required).to_owned(),
                dash_join(&layer.providers),
                dash_join(&layer.missing_inputs),
            ]);
        }
        out.push_str(&table(&rows, "  ", width));
    }

    out.push_str("\nselections\n");
    if turn.selections.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let mut rows = vec![
            [
                "LAYER",
                "PROVIDER",
                "LOCATOR",
                "FINGERPRINT",
                "BYTES",
                "TRUNCATED",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for selection in &turn.selections {
            rows.push(vec![
                selection.layer.clone(),
                optional(&selection.provider),
                optional(&selection.locator),
                optional(&selection.fingerprint),
                selection.bytes.to_string(),
                yes_no(selection.truncated).to_owned(),
            ]);
        }
        out.push_str(&table(&rows, "  ", width));
    }

    if !turn.cuts.is_empty() {
        out.push_str("\ncuts\n");
        let mut rows = vec![
            [
                "LAYER",
                "PROVIDER",
                "LOCATOR",
                "ACTION",
                "BYTES BEFORE",
                "BYTES AFTER",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for cut in &turn.cuts {
            rows.push(vec![
                cut.layer.clone(),
                optional(&cut.provider),
                optional(&cut.locator),
                serde_name(&cut.action),
                cut.bytes_before.to_string(),
                cut.bytes_after.to_string(),
            ]);
        }
        out.push_str(&table(&rows, "  ", width));
    }
    out
}

fn dash_join(values: &[String]) -> String {
    if values.is_empty() {
        "-".to_owned()
    } else {
        values.join(", ")
    }
}

fn provider_section(record: &ProviderRecord, width: usize) -> String {
    let mut heading = format!("  {}: {}", printable(&record.provider), record.status);
    let mut labels = Vec::new();
    if let Some(source) = record.source {
        labels.push(source.as_str().to_owned());
    }
    if let Some(currentness) = record.currentness {
        labels.push(currentness.as_str().to_owned());
    }
    if !record.invoked {
        labels.push("not invoked".to_owned());
    }
    if !labels.is_empty() {
        heading.push_str(&format!(" ({})", labels.join(", ")));
    }
    let mut facts: Vec<(&str, String)> = Vec::new();
    if let Some(detail) = &record.detail {
        facts.push(("detail", detail.clone()));
    }
    facts.push((
        "type",
        record
            .provider_type
            .clone()
            .unwrap_or_else(|| "- (not bound)".to_owned()),
    ));
    facts.push(("contract", record.contract.clone()));
    if let Some(version) = &record.version {
        let source = record
            .version_source
            .map(|s| format!(" (from {})", serde_name(&s)))
            .unwrap_or_default();
        facts.push(("version", format!("{version}{source}")));
    }
    if record.binding_revision.is_some() || record.binding_digest.is_some() {
        facts.push((
            "binding",
            format!(
                "{} {}",
                record.binding_revision.as_deref().unwrap_or("-"),
                record.binding_digest.as_deref().unwrap_or("-")
            ),
        ));
    }
    facts.push(("lookup key", record.lookup_key.clone()));
    facts.push(("request", record.request_digest.clone()));
    let duration = record
        .duration_ms
        .map(|ms| format!(", took {ms} ms"))
        .unwrap_or_default();
    facts.push(("observed", format!("{}{duration}", record.observed_at)));
    if let Some(revision) = &record.upstream_revision {
        facts.push(("upstream", revision.clone()));
    }
    facts.push(("items", record.item_count.to_string()));
    let mut out = format!("{heading}\n");
    out.push_str(&labelled(&facts, "    ", width));
    if !record.items.is_empty() {
        let mut rows = vec![
            ["LOCATOR", "FINGERPRINT", "BYTES"]
                .map(str::to_owned)
                .to_vec(),
        ];
        rows.extend(record.items.iter().map(|item| {
            vec![
                item.locator.clone(),
                item.fingerprint.clone(),
                item.bytes.to_string(),
            ]
        }));
        out.push_str(&table(&rows, "      ", width));
    }
    let mut after = Vec::new();
    if let Some(digest) = &record.material_digest {
        after.push(("material", digest.clone()));
    }
    let ttl = humantime::format_duration(Duration::from_millis(record.retention.ttl_ms));
    after.push((
        "retention",
        format!(
            "{}, ttl {ttl}, content {}",
            record.retention.policy,
            if record.retention.content_retained {
                "retained"
            } else {
                "not retained"
            }
        ),
    ));
    out.push_str(&labelled(&after, "    ", width));
    out
}

/// `label  value` lines, labels padded to one width so sections line up; values escaped
/// and wrapped at spaces to fit `width`, continued under the value column.
fn labelled(facts: &[(&str, String)], indent: &str, width: usize) -> String {
    let mut out = String::new();
    let value_column = indent.len() + LABEL_WIDTH + 2;
    let room = width.saturating_sub(value_column).max(20);
    for (label, value) in facts {
        let lines = wrap(&printable(value), room);
        for (i, line) in lines.iter().enumerate() {
            let label = if i == 0 { label } else { "" };
            out.push_str(&format!("{indent}{label:<LABEL_WIDTH$}  {line}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::output::DEFAULT_WIDTH;
    use crate::contract::{LayerStatus as L, ProviderStatus as P};
    use crate::trace::store::TraceStore;
    use crate::trace::store::testing::{key, simple};
    use clap::Parser;

    /// `ctxd traces …` as the binary parses it.
    #[derive(Debug, Parser)]
    struct TracesCli {
        #[command(subcommand)]
        command: TracesCommand,
    }

    struct Fixture {
        dir: tempfile::TempDir,
    }

    /// The bytes of `testing::key()`, which wrote the store.
    const KEY_BYTES: &[u8] = b"test-key-test-key-test-key-test-key!";

    impl Fixture {
        /// A store at `data/traces.db` and a config at `config/ctxd.toml` naming it.
        fn new() -> Fixture {
            let k = key();
            Fixture::with(&[
                simple(
                    &k,
                    "turn-a1",
                    "acme",
                    1_000,
                    &[("crm", P::Ok), ("orders", P::Timeout)],
                    &[("profile", L::Included)],
                ),
                simple(
                    &k,
                    "turn-g1",
                    "globex",
                    2_000,
                    &[("crm", P::Timeout)],
                    &[("profile", L::Unavailable)],
                ),
                simple(
                    &k,
                    "turn-a2",
                    "acme",
                    3_000,
                    &[("crm", P::Timeout)],
                    &[("profile", L::Unavailable)],
                ),
            ])
        }

        /// A fixture whose store holds `traces`.
        fn with(traces: &[crate::trace::record::TurnTrace]) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let store = dir.path().join("data/traces.db");
            let mut writer = TraceStore::open(&store, &key()).unwrap();
            writer.write_batch(traces).unwrap();
            // The store's key, where `serve` keeps a generated one: it seals cursors.
            std::fs::write(
                dir.path()
                    .join("data")
                    .join(crate::digest::keyed::GENERATED_KEY_FILE),
                KEY_BYTES,
            )
            .unwrap();
            std::fs::create_dir_all(dir.path().join("config")).unwrap();
            std::fs::write(
                dir.path().join("config/ctxd.toml"),
                "[trace]\nstore = \"sqlite:../data/traces.db\"\ngenerate_digest_key = true\n[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n[[tenants.projects]]\npath = \"project.json\"\nbinding = \"binding.toml\"\n",
            )
            .unwrap();
            Fixture { dir }
        }

        fn store(&self) -> String {
            self.dir.path().join("data/traces.db").display().to_string()
        }

        fn config(&self) -> String {
            self.dir
                .path()
                .join("config/ctxd.toml")
                .display()
                .to_string()
        }

        /// Runs `ctxd traces ARGS`; the output, or the error as `main` prints it.
        fn run(&self, args: &[&str]) -> Result<String, String> {
            let parsed =
                TracesCli::try_parse_from(std::iter::once("traces").chain(args.iter().copied()))
                    .map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            run_with(
                &TracesArgs {
                    command: parsed.command,
                },
                &EnvVars::default(),
                &mut out,
            )
            .map_err(|e| format!("{e:#}"))?;
            Ok(String::from_utf8(out).unwrap())
        }
    }

    #[test]
    fn search_prints_one_line_per_turn_newest_first() {
        let fixture = Fixture::new();
        let out = fixture
            .run(&["search", "--store", &fixture.store()])
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert!(lines[0].starts_with("STARTED AT"), "{out}");
        assert!(
            lines[1].contains("turn-a2") && lines[1].contains("crm=TIMEOUT"),
            "{out}"
        );
        assert!(
            lines[2].contains("turn-g1") && lines[2].contains("globex"),
            "{out}"
        );
        assert!(
            lines[3].contains("turn-a1") && lines[3].ends_with("crm=OK orders=TIMEOUT"),
            "{out}"
        );
        assert!(
            lines[3].contains("1970-01-01T00:00:01") || lines[3].contains("2026"),
            "{out}"
        );
        assert_eq!(lines[4], "no more results");
    }

    #[test]
    fn search_filters_and_pages() {
        let fixture = Fixture::new();
        let store = fixture.store();
        let out = fixture
            .run(&[
                "search",
                "--store",
                &store,
                "--provider",
                "crm",
                "--provider-status",
                "timeout",
                "--limit",
                "1",
            ])
            .unwrap();
        assert!(out.contains("turn-a2"), "{out}");
        assert!(
            !out.contains("turn-g1") && !out.contains("turn-a1"),
            "{out}"
        );
        let cursor = out
            .lines()
            .find_map(|line| line.strip_prefix("next page: --cursor "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        let next = fixture
            .run(&[
                "search",
                "--store",
                &store,
                "--provider",
                "crm",
                "--provider-status",
                "TIMEOUT",
                "--cursor",
                &cursor,
            ])
            .unwrap();
        assert!(next.contains("turn-g1"), "{next}");
        assert!(
            !next.contains("turn-a2") && !next.contains("turn-a1"),
            "{next}"
        );
        let acme = fixture
            .run(&[
                "search",
                "--store",
                &store,
                "--tenant",
                "acme",
                "--provider-status",
                "TIMEOUT",
            ])
            .unwrap();
        assert!(
            acme.contains("turn-a2") && acme.contains("turn-a1"),
            "{acme}"
        );
        assert!(!acme.contains("turn-g1"), "{acme}");

        let layer = fixture
            .run(&[
                "search", "--store", &store, "--layer", "profile", "--status", "INCLUDED",
            ])
            .unwrap();
        assert!(
            layer.contains("turn-a1") && !layer.contains("turn-a2"),
            "{layer}"
        );
        let window = fixture
            .run(&[
                "search",
                "--store",
                &store,
                "--since",
                "2000",
                "--until",
                "1970-01-01T00:00:03Z",
            ])
            .unwrap();
        assert!(window.contains("turn-g1"), "{window}");
        assert!(
            !window.contains("turn-a1") && !window.contains("turn-a2"),
            "{window}"
        );
        let none = fixture
            .run(&["search", "--store", &store, "--tenant", "initech"])
            .unwrap();
        assert_eq!(none, "no traces match\n");
    }

    #[test]
    fn a_cursor_continues_only_its_own_search() {
        let fixture = Fixture::new();
        let store = fixture.store();
        let first = fixture
            .run(&["search", "--store", &store, "--limit", "1"])
            .unwrap();
        let cursor = first
            .lines()
            .find_map(|line| line.strip_prefix("next page: --cursor "))
            .unwrap_or_else(|| panic!("{first}"))
            .to_owned();
        assert!(
            !cursor.contains(&format!("{:016x}", 3)),
            "no row number shows"
        );
        // Same search, another page size: it continues.
        let next = fixture
            .run(&["search", "--store", &store, "--cursor", &cursor])
            .unwrap();
        assert!(
            next.contains("turn-g1") && !next.contains("turn-a2"),
            "{next}"
        );
        // Another tenant scope or other filters: refused, naming the flag.
        for other in [
            &["--tenant", "acme"][..],
            &["--provider", "crm"],
            &["--since", "1"],
        ] {
            let mut args = vec!["search", "--store", store.as_str(), "--cursor", &cursor];
            args.extend_from_slice(other);
            let error = fixture.run(&args).unwrap_err();
            assert!(
                error.contains("--cursor") && error.contains("not one this search issued"),
                "{other:?}: {error}"
            );
        }
        // A forged row number is no cursor.
        let error = fixture
            .run(&["search", "--store", &store, "--cursor", "0000000000000002"])
            .unwrap_err();
        assert!(error.contains("--cursor"), "{error}");
    }

    #[test]
    fn without_the_digest_key_a_search_says_more_follow() {
        let fixture = Fixture::new();
        let store = fixture.store();
        std::fs::remove_file(
            fixture
                .dir
                .path()
                .join("data")
                .join(crate::digest::keyed::GENERATED_KEY_FILE),
        )
        .unwrap();
        let first = fixture
            .run(&["search", "--store", &store, "--limit", "1"])
            .unwrap();
        assert!(first.contains("turn-a2"), "{first}");
        assert!(
            first.contains("more results follow; paging needs the digest key: no digest key"),
            "{first}"
        );
        let error = fixture
            .run(&["search", "--store", &store, "--cursor", &"0a".repeat(48)])
            .unwrap_err();
        assert!(
            error.contains("paging needs the digest key the cursor was sealed with"),
            "{error}"
        );
    }

    #[test]
    fn search_as_json_is_the_page() {
        let fixture = Fixture::new();
        let out = fixture
            .run(&[
                "search",
                "--config",
                &fixture.config(),
                "--format",
                "json",
                "--limit",
                "2",
            ])
            .unwrap();
        let page: serde_json::Value = serde_json::from_str(&out).unwrap();
        let traces = page["traces"].as_array().unwrap();
        assert_eq!(traces.len(), 2);
        assert_eq!(traces[0]["turn"]["turnId"], "turn-a2");
        assert_eq!(traces[1]["providers"][0]["provider"], "crm");
        assert!(page["nextCursor"].is_string());
    }

    #[test]
    fn show_prints_the_turn_and_its_provider_records() {
        let fixture = Fixture::new();
        let out = fixture
            .run(&[
                "show",
                "turn-a1",
                "--store",
                &format!("sqlite:{}", fixture.store()),
            ])
            .unwrap();
        for expected in [
            "turn turn-a1",
            "  tenant      acme",
            "layers",
            "profile",
            "PROVIDER_ITEMS",
            "selections",
            "crm/item-",
            "providers",
            "  crm: OK (LIVE, CURRENT)",
            "  orders: TIMEOUT (LIVE)",
            "lookup key  customerId",
            "hmac-sha256:",
            "version     5.0.1 (from response)",
            "retention   digest, ttl 7days, content not retained",
        ] {
            assert!(out.contains(expected), "{expected:?} in\n{out}");
        }
        assert!(!out.contains("CUST-0001"), "never a lookup value");
        let json = fixture
            .run(&[
                "show",
                "turn-a1",
                "--config",
                &fixture.config(),
                "--format",
                "json",
            ])
            .unwrap();
        let stored: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(stored["turn"]["tenant"], "acme");
        assert_eq!(stored["providers"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn show_respects_the_tenant() {
        let fixture = Fixture::new();
        let store = fixture.store();
        assert!(
            fixture
                .run(&["show", "turn-a1", "--store", &store, "--tenant", "acme"])
                .is_ok()
        );
        let error = fixture
            .run(&["show", "turn-a1", "--store", &store, "--tenant", "globex"])
            .unwrap_err();
        assert!(
            error.contains("turn \"turn-a1\" of tenant \"globex\" is not in the trace store"),
            "{error}"
        );
        let error = fixture
            .run(&["show", "nope", "--store", &store])
            .unwrap_err();
        assert!(
            error.contains("turn \"nope\" is not in the trace store"),
            "{error}"
        );
    }

    #[test]
    fn bad_values_name_their_flag() {
        let fixture = Fixture::new();
        let store = fixture.store();
        let cases: &[(&[&str], &str)] = &[
            (&["--provider-status", "TIMOUT"], "--provider-status"),
            (&["--status", "GREEN"], "--status"),
            (&["--since", "yesterday"], "--since"),
            (&["--until", "2026-13-40T00:00:00Z"], "--until"),
            (&["--limit", "0"], "--limit"),
            (&["--limit", "501"], "--limit"),
            (&["--cursor", "zz"], "--cursor \"zz\""),
            (
                &["--since", "5", "--until", "5"],
                "--since 5 is not before --until 5",
            ),
            (&["--format", "yaml"], "--format"),
        ];
        for (extra, expected) in cases {
            let mut args = vec!["search", "--store", store.as_str()];
            args.extend_from_slice(extra);
            let error = fixture.run(&args).unwrap_err();
            assert!(error.contains(expected), "{extra:?}: {error}");
        }
        let error = fixture
            .run(&["search", "--provider-status", "TIMOUT"])
            .unwrap_err();
        assert!(
            error.contains("NOT_FOUND, TIMEOUT"),
            "lists the statuses: {error}"
        );
    }

    #[test]
    fn a_missing_store_is_named_with_where_it_came_from() {
        let fixture = Fixture::new();
        let missing = fixture.dir.path().join("nope.db").display().to_string();
        let error = fixture.run(&["search", "--store", &missing]).unwrap_err();
        assert!(
            error.contains(&format!(
                "the trace store {missing} (--store) does not exist"
            )),
            "{error}"
        );
        assert!(!fixture.dir.path().join("nope.db").exists());
        std::fs::remove_file(fixture.dir.path().join("data/traces.db")).unwrap();
        let error = fixture
            .run(&["show", "x", "--config", &fixture.config()])
            .unwrap_err();
        assert!(error.contains("[trace] store of"), "{error}");
        let error = fixture
            .run(&[
                "search",
                "--config",
                &fixture.dir.path().join("none.toml").display().to_string(),
            ])
            .unwrap_err();
        assert!(error.contains("none.toml"), "{error}");
    }

    /// A turn as the demo records one: long ids, items behind keyed locators, and an
    /// objective a caller chose.
    fn demo_like_turn(objective: &str) -> crate::trace::record::TurnTrace {
        use crate::trace::store::testing::{ProviderSpec, item, turn};
        let items = (0..3)
            .map(|i| item(&format!("CUST-104{i}"), "Profile", "Gold tier since 2020"))
            .collect();
        let mut trace = turn(
            &key(),
            "0195a3c2-7f41-7d2e-9b8a-4c1d2e3f4a5b",
            "acme",
            1_764_500_000_000,
            &[
                ProviderSpec::new("customer-data", P::Ok).items(items),
                ProviderSpec::new("open-tickets", P::Timeout),
            ],
            &[
                ("customer-profile", L::Included),
                ("open-tickets", L::Unavailable),
            ],
        );
        trace.turn.objective = Some(objective.to_owned());
        trace
    }

    #[test]
    fn show_escapes_what_callers_stored() {
        let hostile = "billing\ntenant      alpha\n\u{1b}[2Jblocked     yes\u{2028}\r";
        let fixture = Fixture::with(&[demo_like_turn(hostile)]);
        let out = fixture
            .run(&[
                "show",
                "0195a3c2-7f41-7d2e-9b8a-4c1d2e3f4a5b",
                "--store",
                &fixture.store(),
            ])
            .unwrap();
        assert!(
            out.contains("  objective   billing\\ntenant      alpha\\n\\u{1b}[2Jblocked     yes\\u{2028}\\r\n"),
            "{out}"
        );
        assert!(
            !out.lines()
                .any(|l| l.starts_with("tenant") || l.starts_with("blocked")),
            "{out}"
        );
        assert!(!out.contains('\u{1b}') && !out.contains('\u{2028}') && !out.contains('\r'));
        // Reasons as the API spells them.
        assert!(
            out.contains("PROVIDER_ITEMS") && !out.contains("ProviderItems"),
            "{out}"
        );
    }

    #[test]
    fn show_fits_the_terminal() {
        let fixture = Fixture::with(&[demo_like_turn("support")]);
        let show = |columns: Option<&str>| {
            let parsed = TracesCli::try_parse_from([
                "traces",
                "show",
                "0195a3c2-7f41-7d2e-9b8a-4c1d2e3f4a5b",
                "--store",
                &fixture.store(),
            ])
            .unwrap();
            let env: EnvVars = columns.map(|c| ("COLUMNS", c)).into_iter().collect();
            let mut out = Vec::new();
            run_with(
                &TracesArgs {
                    command: parsed.command,
                },
                &env,
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        for (columns, width) in [(None, DEFAULT_WIDTH), (Some("80"), 80)] {
            let out = show(columns);
            for line in out.lines() {
                // Only a single word longer than the room left runs over: a digest.
                let single_value = line.split_whitespace().count() <= 2;
                assert!(
                    line.chars().count() <= width || (width < DEFAULT_WIDTH && single_value),
                    "{width}: {line:?}\n{out}"
                );
            }
            // The selections became records, each column a line.
            assert!(out.contains("  FINGERPRINT  sha256:"), "{out}");
        }
        // On a wide terminal the selections stay a table.
        let wide = show(Some("250"));
        assert!(
            wide.lines()
                .any(|l| l.starts_with("  LAYER") && l.contains("FINGERPRINT")),
            "{wide}"
        );
    }

    #[test]
    fn times_parse_as_rfc3339_or_milliseconds() {
        assert_eq!(parse_time("1764500000123"), Ok(1_764_500_000_123));
        assert_eq!(
            parse_time("2025-11-30T10:53:20.123Z"),
            Ok(1_764_500_000_123)
        );
        assert_eq!(parse_time("2025-11-30 10:53:20"), Ok(1_764_500_000_000));
        assert!(parse_time("").is_err());
        assert!(parse_time("-5").is_err());
        assert!(parse_time("99999999999999999999").is_err());
    }
}
