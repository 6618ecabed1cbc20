//! The fuzz targets, their seeds and invariants, and the short and long runs.

use super::engine::{self, Target};
use super::{LONG_INPUTS, SHORT_INPUTS};
use crate::bounds::{MAX_ITEM_BYTES, check_items_refusing};
use crate::config::{Binding, ServerConfig};
use crate::contract::{Item, ProviderStatus};
use crate::handles::bounds::Clock;
use crate::handles::request::{self, Limits};
use crate::handles::{HandleMaterial, LimitSettings, ops};
use crate::project::Project;
use crate::providers::http::{parse_describe, parse_lookup};
use crate::secrets::redact::SecretHandling;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The limit every fuzzed lookup answer is parsed under.
const LOOKUP_LIMIT: u32 = 5;
/// Secrets planted in the seeds of the config formats: no error may show them (or
/// anything else the secret scanner flags).
/// AWS's documented example key id is not among them: the scanner reads it as a placeholder.
const PLANTED_SECRETS: &[&str] = &[
    "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "AKIAQQQQQQQQQQQQQQQQ",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn file(path: &str) -> Vec<u8> {
    std::fs::read(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn text(input: &[u8]) -> Option<&str> {
    std::str::from_utf8(input).ok()
}

/// A provider's `lookup` answer: never more items than the limit, never an item over
/// the item bound or failing the bounds; a failure carries no items (by type).
fn lookup_answer(input: &[u8]) -> Result<(), String> {
    let outcome = parse_lookup(input, LOOKUP_LIMIT, SecretHandling::Refuse);
    let items = outcome.items_found();
    if items.len() > LOOKUP_LIMIT as usize {
        return Err(format!("{} items over the limit", items.len()));
    }
    if let Some(item) = items
        .iter()
        .find(|item| crate::handles::item_bytes(item) > MAX_ITEM_BYTES)
    {
        return Err(format!("item {} over the item bound", item.id.len()));
    }
    if outcome.status() == ProviderStatus::Ok && check_items_refusing(items, LOOKUP_LIMIT).is_err()
    {
        return Err("an OK answer fails the bounds".to_owned());
    }
    Ok(())
}

/// A provider's `describe` answer: accepted only with the contract and `lookup`.
fn describe_answer(input: &[u8]) -> Result<(), String> {
    if parse_describe(input).is_ok() {
        let value: serde_json::Value =
            serde_json::from_slice(input).map_err(|_| "accepted non-JSON".to_owned())?;
        let lookup = value["capabilities"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c == "lookup"));
        if value["contract"] != crate::contract::CONTRACT || !lookup {
            return Err("accepted a describe without the contract and lookup".to_owned());
        }
    }
    Ok(())
}

/// Keys a fuzzed turn request may carry in `inputs` (the default limit).
const TURN_INPUT_KEYS: usize = 64;

/// A turn request: parsed, or refused with a short message that repeats no value.
fn turn_request(input: &[u8]) -> Result<(), String> {
    let Err(error) = crate::api::parse_turn(input, TURN_INPUT_KEYS) else {
        return Ok(());
    };
    let message = error.to_string();
    if message.len() > 1024 {
        return Err(format!("a {}-byte error message", message.len()));
    }
    let (mut values, mut names) = (Vec::new(), Vec::new());
    if let Ok(document) = serde_json::from_slice::<serde_json::Value>(input) {
        strings_of(&document, &mut values, &mut names);
    }
    // A value that is also a name — a key of the body, or a field of the API — may be
    // named; what must never show is a value as a value.
    let repeated = values.iter().find(|v| {
        v.len() >= 8
            && message.contains(v.as_str())
            && !names.contains(v)
            && !TURN_FIELDS.contains(&v.as_str())
    });
    match repeated {
        Some(value) => Err(format!("the message repeats a {}-byte value", value.len())),
        None => Ok(()),
    }
}

/// The turn request's own field names.
const TURN_FIELDS: &[&str] = &[
    "project",
    "profile",
    "objective",
    "consumer",
    "inputs",
    "budget",
    "maxBytes",
    "deadlineMs",
];

/// Every string value and every key of a JSON document.
fn strings_of(value: &serde_json::Value, values: &mut Vec<String>, names: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => values.push(s.clone()),
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| strings_of(v, values, names));
        }
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                names.push(key.clone());
                strings_of(v, values, names);
            }
        }
        _ => {}
    }
}

/// A Project: every error has a `$` path and shows nothing the secret scanner flags; an
/// accepted Project's Build loads back with the same digest.
fn project(input: &[u8]) -> Result<(), String> {
    let Some(text) = text(input) else {
        return Ok(());
    };
    match Project::from_json(text) {
        Ok(project) => {
            let build = project.build().to_json_pretty();
            let again = Project::from_json(&build)
                .map_err(|e| format!("the Build of an accepted Project is refused: {e}"))?;
            if again.digest != project.digest {
                return Err("the Build loads back with another digest".to_owned());
            }
            Ok(())
        }
        Err(errors) => {
            if errors.0.is_empty() {
                return Err("refused with no problem".to_owned());
            }
            if let Some(problem) = errors.0.iter().find(|p| !p.path.starts_with('$')) {
                return Err(format!("a problem without a JSON path: {problem:?}"));
            }
            config_lines(
                errors
                    .0
                    .iter()
                    .map(|p| format!("{}: {}", p.path, p.message))
                    .collect(),
            )
        }
    }
}

/// Config text: refused or accepted, no error shows anything the secret scanner flags
/// (the planted secrets among them).
fn config_lines(lines: Vec<String>) -> Result<(), String> {
    let shown = lines.join("\n");
    match crate::secrets::scan(&shown) {
        Some(detector) => Err(format!("an error shows a secret ({})", detector.name())),
        None => Ok(()),
    }
}

fn binding(input: &[u8]) -> Result<(), String> {
    let Some(text) = text(input) else {
        return Ok(());
    };
    match Binding::parse(text, Path::new("/srv/ctxd/config")) {
        Ok(_) => Ok(()),
        Err(errors) => config_lines(errors.lines()),
    }
}

fn server_config(input: &[u8]) -> Result<(), String> {
    let Some(text) = text(input) else {
        return Ok(());
    };
    match ServerConfig::parse(text, Path::new("/srv/ctxd/config")) {
        Ok(_) => Ok(()),
        Err(errors) => config_lines(errors.lines()),
    }
}

/// A clock that never moves: an operation's time limit never cuts it short.
struct Stopped(Instant);

impl Clock for Stopped {
    fn now(&self) -> Instant {
        self.0
    }
}

/// A handle operation: parsed under the default limit settings, then run on text and on
/// items; its output never exceeds `maxResults` or `maxBytes`.
fn handle_operation(input: &[u8]) -> Result<(), String> {
    let Ok(request) = request::parse(input, &LimitSettings::default()) else {
        return Ok(());
    };
    let materials = [
        HandleMaterial::Text("line one\nline two ünïcødé\n\nlast".repeat(40)),
        HandleMaterial::Items(vec![
            Item {
                id: "A-1".into(),
                title: Some("first".into()),
                content: "alpha beta".repeat(30),
                metadata: Default::default(),
                updated_at: None,
            },
            Item {
                id: "A-2".into(),
                title: None,
                content: "gamma".into(),
                metadata: Default::default(),
                updated_at: Some("2026-11-30".into()),
            },
        ]),
    ];
    let clock = Stopped(Instant::now());
    for material in &materials {
        let execution = ops::run(material, &request.op, &request.limits, &clock);
        if let Ok(output) = execution.result {
            within(&output, &request.limits)?;
        }
    }
    Ok(())
}

fn within(output: &crate::handles::OpOutput, limits: &Limits) -> Result<(), String> {
    if output.entries.len() > limits.max_results {
        return Err(format!(
            "{} entries over maxResults {}",
            output.entries.len(),
            limits.max_results
        ));
    }
    if output.bytes_returned > limits.max_bytes {
        return Err(format!(
            "{} bytes over maxBytes {}",
            output.bytes_returned, limits.max_bytes
        ));
    }
    Ok(())
}

fn wire_seeds() -> Vec<Vec<u8>> {
    [
        r#"{"contract":"context-provider.v1","version":"5.0.1","revision":"crm-r9","currentness":"CURRENT","items":[{"id":"CUST-1042","title":"Current account state","content":"Gold tier","metadata":{"plan":"Enterprise","seats":240},"updatedAt":"2026-10-08"}]}"#,
        r#"{"contract":"context-provider.v1","items":[]}"#,
        r#"{"contract":"context-provider.v1","currentness":"STALE","items":[{"id":"a"},{"id":"b","content":""}]}"#,
        r#"{"contract":"context-provider.v1","version":"1","capabilities":["describe","lookup"]}"#,
        r#"{"contract":"context-provider.v2","records":7}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Every target, with its seeds and dictionary.
pub(crate) fn targets() -> Vec<Target> {
    let wire_tokens = vec![
        "contract",
        "context-provider.v1",
        "items",
        "id",
        "title",
        "content",
        "metadata",
        "updatedAt",
        "currentness",
        "CURRENT",
        "STALE",
        "version",
        "revision",
        "capabilities",
        "lookup",
    ];
    vec![
        Target {
            name: "provider_lookup",
            seeds: wire_seeds(),
            tokens: wire_tokens.clone(),
            json: true,
            max_len: 256 * 1024,
            check: lookup_answer,
        },
        Target {
            name: "provider_describe",
            seeds: wire_seeds(),
            tokens: wire_tokens,
            json: true,
            max_len: 64 * 1024,
            check: describe_answer,
        },
        Target {
            name: "turn_request",
            seeds: vec![
                br#"{"project":"support","profile":"default","objective":"billing","consumer":"support-agent","inputs":{"customerId":"CUST-1042"},"budget":{"maxBytes":8000},"deadlineMs":900}"#.to_vec(),
                br#"{"project":"p","inputs":{}}"#.to_vec(),
            ],
            tokens: vec![
                "project", "profile", "objective", "consumer", "inputs", "budget", "maxBytes",
                "deadlineMs", "customerId",
            ],
            json: true,
            max_len: 64 * 1024,
            check: turn_request,
        },
        Target {
            name: "project",
            seeds: vec![file("fixtures/demo/project.json")],
            tokens: vec![
                "id", "version", "budget", "maxBytes", "providers", "lookup", "input", "pattern",
                "maxItems", "layers", "content", "bindings", "provider", "required",
                "requiresInput", "scope", "objectives", "consumers", "currentness", "handles",
                "profiles", "include", "exclude", "tests", "request", "expect", "fixtures",
                "endpoint", "url", "secret", "token", "database", "^(a+)+$", "[", "(?P<",
                PLANTED_SECRETS[0], PLANTED_SECRETS[1],
            ],
            json: true,
            max_len: 128 * 1024,
            check: project,
        },
        Target {
            name: "binding",
            seeds: vec![
                file("config/bindings/demo.toml"),
                file("config/bindings/example-http.toml"),
                format!(
                    "revision = \"r1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"https://crm.example/ctx\"\ntoken = \"{}\"\n",
                    PLANTED_SECRETS[0]
                )
                .into_bytes(),
            ],
            tokens: vec![
                "revision", "[defaults]", "[providers.x]", "type", "\"http\"", "\"sqlite\"",
                "endpoint", "secret_env", "timeout_ms", "database", "query", "version",
                "max_concurrency", "[pool]", "[circuit]", "retention", "retention_ttl",
                "\"content\"", "password = ", "= \"", "[[", "]]", "=", "\"\"\"",
                PLANTED_SECRETS[0], PLANTED_SECRETS[1],
            ],
            json: false,
            max_len: 64 * 1024,
            check: binding,
        },
        Target {
            name: "server_config",
            seeds: vec![
                file("config/ctxd.toml"),
                format!(
                    "[server]\nlisten = \"127.0.0.1:8080\"\n[trace]\nstore = \"sqlite:t.db\"\ndigest_key = \"{}\"\n",
                    PLANTED_SECRETS[1]
                )
                .into_bytes(),
            ],
            tokens: vec![
                "[server]", "listen", "[trace]", "store", "digest_key_env", "[[tenants]]", "id",
                "api_key_sha256", "api_key_env", "max_in_flight", "[[tenants.projects]]", "path",
                "binding", "[handles]", "[metrics]", "[limits]", "=", "\"", "[[", "]]",
                PLANTED_SECRETS[0], PLANTED_SECRETS[1],
            ],
            json: false,
            max_len: 64 * 1024,
            check: server_config,
        },
        Target {
            name: "handle_operation",
            seeds: vec![
                br#"{"version":1,"op":{"kind":"peek","item":0,"maxBytes":600}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"search","pattern":"two","maxResults":3}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"partition","by":"lines","size":2}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"slice","start":3,"length":50}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"map","function":"uppercase"}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"reduce","function":"count"}}"#.to_vec(),
                br#"{"version":1,"op":{"kind":"metadata"}}"#.to_vec(),
            ],
            tokens: vec![
                "version", "op", "kind", "peek", "slice", "search", "partition", "map",
                "reduce", "metadata", "item", "start", "length", "pattern", "by", "size",
                "lines", "function", "maxResults", "maxBytes", "timeLimitMs", "head", "tail",
            ],
            json: true,
            max_len: 16 * 1024,
            check: handle_operation,
        },
    ]
}

/// The saved findings of a target, replayed in every run.
fn findings(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = root().join("src/fuzz/findings").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a finding reads");
            (path, bytes)
        })
        .collect()
}

#[test]
fn saved_findings_stay_fixed() {
    for target in targets() {
        for (path, input) in findings(target.name) {
            engine::check_one(&target, &input)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[test]
fn short_run_of_every_target() {
    for (i, target) in targets().iter().enumerate() {
        engine::run(target, SHORT_INPUTS, 0x5eed_0000 + i as u64).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The long mode: `CTXD_FUZZ_INPUTS` inputs per target (default one million), each
/// target from `CTXD_FUZZ_SEED` (default: the clock), executions per second printed.
#[test]
#[ignore = "long: run by hand with --release (see src/fuzz/mod.rs)"]
fn long() {
    let inputs = std::env::var("CTXD_FUZZ_INPUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(LONG_INPUTS);
    let seed = std::env::var("CTXD_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let only = std::env::var("CTXD_FUZZ_TARGET").ok();
    let mut failures = Vec::new();
    for (i, target) in targets().iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != target.name) {
            continue;
        }
        let target_seed = seed.wrapping_add(i as u64);
        match engine::run(target, inputs, target_seed) {
            Ok(stats) => println!(
                "{:<18} {:>9} inputs in {:>7.1} s = {:>9.0}/s (seed {target_seed})",
                target.name,
                stats.inputs,
                stats.elapsed.as_secs_f64(),
                stats.per_second()
            ),
            Err(finding) => {
                println!(
                    "{:<18} FINDING (seed {target_seed}): {finding}",
                    target.name
                );
                failures.push(finding);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
