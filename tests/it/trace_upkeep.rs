//! The trace store kept within its keep and its bounds by a serving ctxd: records past
//! their keep deleted while it serves, turns refused with `503` before the store or the
//! disk under it runs out of room — nothing answered untraced, the store intact — and
//! `ctxd traces prune` for operators.

use crate::provider_server::{ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, metrics_of, turn};
use crate::support::{ctxd as ctxd_cli, stderr_of, stdout_of};
use ctxd::trace::store::TraceReader;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const KEY: &str = "acme-upkeep-key";
const ARCHIVE_KEY: &str = "archive-upkeep-key";
const PROVIDERS: [&str; 4] = ["crm", "orders", "tickets", "billing"];

/// Four providers, one layer each: a turn writes a turn record and four provider records.
fn project() -> String {
    let providers: Vec<Value> = PROVIDERS
        .iter()
        .map(|id| json!({"id": id, "name": id, "lookup": {"input": "customerId"}, "maxItems": 3}))
        .collect();
    let layers: Vec<Value> = PROVIDERS
        .iter()
        .map(|id| json!({"id": format!("{id}-layer"), "name": id, "bindings": [{"provider": id}]}))
        .collect();
    json!({
        "id": "acme", "version": "1.0.0",
        "providers": providers, "layers": layers, "profiles": [{"id": "default"}]
    })
    .to_string()
}

fn binding(server: &RunningProvider) -> String {
    let mut text = "revision = \"upkeep-1\"\n[defaults]\ntimeout_ms = 2000\n".to_owned();
    for id in PROVIDERS {
        text.push_str(&format!(
            "[providers.{id}]\ntype = \"http\"\nendpoint = \"{}\"\nretention = \"digest\"\n",
            server.url()
        ));
    }
    text
}

async fn provider() -> RunningProvider {
    ProviderServer::new()
        .lookup_items(vec![json!({
            "id": "REC-1", "title": "A record", "content": "Some content of a record",
            "updatedAt": "2026-11-28"
        })])
        .start()
        .await
}

fn request(i: usize) -> Value {
    json!({"project": "acme", "inputs": {"customerId": format!("CUST-{i:06}")}})
}

/// What a run of turns got: the ids of the answered ones, the bodies of the refused ones.
#[derive(Default)]
struct Answers {
    answered: Vec<String>,
    refused: Vec<Value>,
}

impl Answers {
    /// Files one turn's answer: answered (200) or refused (503); anything else fails.
    fn record(&mut self, status: u16, body: Value) {
        match status {
            200 => self
                .answered
                .push(body["turnId"].as_str().unwrap().to_owned()),
            503 => self.refused.push(body),
            other => panic!("turn answered {other}: {body}"),
        }
    }
}

/// Sends turns, 16 at a time, until `refusals` of them were refused (or `most` sent).
async fn turns_until_refused(ctxd: &Ctxd, first: usize, refusals: usize, most: usize) -> Answers {
    let mut answers = Answers::default();
    let mut next = first;
    while answers.refused.len() < refusals && next < first + most {
        let batch: Vec<_> = (next..next + 16)
            .map(|i| turn(ctxd, KEY, request(i)))
            .collect();
        next += 16;
        for (status, body) in futures_util::future::join_all(batch).await {
            answers.record(status, body);
        }
    }
    answers
}

/// Whether the store holds the turn's record (read as any SQLite client would).
fn has_turn(store: &Path, turn_id: &str) -> bool {
    rusqlite::Connection::open(store)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM turns WHERE turn_id = ?1",
            [turn_id],
            |row| row.get::<_, i64>(0),
        )
        .unwrap()
        == 1
}

async fn readiness(ctxd: &Ctxd) -> (u16, Value) {
    let response = client().get(ctxd.url("/readyz")).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// After the server stopped: every answered turn is in the store, nothing else is, and
/// SQLite finds the file intact.
fn assert_every_answered_turn_is_traced(store: &Path, answered: &[String]) {
    let reader = TraceReader::open(store, None).unwrap();
    assert_eq!(
        reader.counts().unwrap().turns,
        answered.len() as u64,
        "the store holds exactly the answered turns"
    );
    for turn_id in answered {
        assert!(
            has_turn(store, turn_id),
            "answered turn {turn_id} is traced"
        );
    }
    let check: String = rusqlite::Connection::open(store)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// A ctxd serving the four-provider project with these `[trace]` lines, and its provider.
async fn serve(trace_extra: &str) -> (RunningProvider, Deployment, Ctxd) {
    let server = provider().await;
    let tenant = TenantSpec::new("acme", KEY, project(), binding(&server));
    let deployment = Deployment::with_trace(&[tenant], trace_extra);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    (server, deployment, ctxd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_at_its_bound_refuses_turns_and_every_answered_turn_is_traced() {
    let (_server, deployment, mut ctxd) =
        serve("max_store_bytes = 16777216\nmin_free_bytes = 0\nbatch_ms = 5").await;
    let mut answers = turns_until_refused(&ctxd, 0, 32, 20_000).await;
    assert!(
        answers.answered.len() > 100,
        "{} turns answered before the store filled",
        answers.answered.len()
    );
    assert!(answers.refused.len() >= 32, "the store filled");
    // Sixteen turns at a time are refused as soon as their reservations together do not
    // fit; the store may still have room for one turn then (on a fast machine it does).
    // Single turns fill that room, until the store has none for another.
    for i in 100_000..100_000 + 5_000 {
        if readiness(&ctxd).await.0 != 200 {
            break;
        }
        let (status, body) = turn(&ctxd, KEY, request(i)).await;
        answers.record(status, body);
    }
    for body in &answers.refused {
        assert_eq!(body["error"]["code"], "RUNTIME_UNAVAILABLE", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("trace.max_store_bytes"), "{message}");
    }
    let (status, ready) = readiness(&ctxd).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "trace_store_full");
    assert!(
        ready["reason"]
            .as_str()
            .unwrap()
            .contains("trace.max_store_bytes = 16777216"),
        "{ready}"
    );
    let exported = metrics_of(&ctxd).await;
    assert!(
        exported.contains("ctxd_trace_store_out_of_room 1"),
        "{exported}"
    );
    assert!(exported.contains("ctxd_trace_store_bytes "), "{exported}");
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
    let logs = ctxd.logs();
    assert!(
        logs.contains("turns are refused until records are pruned or the bound is raised"),
        "the writer says why, once: {logs}"
    );
    assert_every_answered_turn_is_traced(&deployment.store(), &answers.answered);
}

/// A tmpfs of `size` mounted at `at`, unmounted when dropped; `None` where this process
/// may not mount (a container without CAP_SYS_ADMIN): then the test says so and skips.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|status| status.success());
        if mounted {
            return Some(Tmpfs(at.to_path_buf()));
        }
        eprintln!("skipped: this process may not mount a tmpfs (it needs CAP_SYS_ADMIN)");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the filesystem at `folder` until fewer than `leave` bytes are available.
fn fill_disk(folder: &Path, leave: u64) -> PathBuf {
    let filler = folder.join("filler");
    let available = available_bytes(folder);
    let size = available.saturating_sub(leave);
    let status = Command::new("fallocate")
        .args(["-l", &size.to_string()])
        .arg(&filler)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(available_bytes(folder) < leave + 64 * 1024);
    filler
}

fn available_bytes(folder: &Path) -> u64 {
    let output = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(folder)
        .output()
        .unwrap();
    stdout_of(&output)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_turns_before_they_go_untraced_and_serving_resumes_when_space_returns()
{
    let dir = tempfile::tempdir().unwrap();
    let Some(tmpfs) = Tmpfs::mount(&dir.path().join("disk"), "24m") else {
        return;
    };
    let store = tmpfs.0.join("traces.db");
    let server = provider().await;
    let tenant = TenantSpec::new("acme", KEY, project(), binding(&server));
    let deployment = Deployment::with_store(
        &[tenant],
        store.to_str().unwrap(),
        "min_free_bytes = 4194304\nbatch_ms = 5",
    );
    let mut ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let before = turns_until_refused(&ctxd, 0, 1, 64).await;
    assert_eq!(before.answered.len(), 64, "room at first");

    // Another process takes the disk: less than min_free_bytes stays available.
    let filler = fill_disk(&tmpfs.0, 1024 * 1024);
    let full = turns_until_refused(&ctxd, 1_000, 32, 640).await;
    assert!(full.refused.len() >= 32);
    assert!(
        full.answered.len() <= 16,
        "refused within one round of turns, not {}",
        full.answered.len()
    );
    let message = full.refused[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("trace.min_free_bytes = 4194304"),
        "{message}"
    );
    let (status, ready) = readiness(&ctxd).await;
    assert_eq!(
        (status, ready["status"].as_str()),
        (503, Some("trace_disk_full"))
    );

    // The space comes back: turns are answered again, without a restart.
    std::fs::remove_file(filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = Answers::default();
    while after.answered.is_empty() {
        assert!(Instant::now() < deadline, "serving did not resume");
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = turns_until_refused(&ctxd, 2_000, 1, 16).await;
    }
    assert_eq!(readiness(&ctxd).await.0, 200);
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
    let answered: Vec<String> = [before.answered, full.answered, after.answered].concat();
    assert_every_answered_turn_is_traced(&store, &answered);
    assert!(
        !ctxd.logs().contains("commit failed"),
        "no write ever failed: {}",
        ctxd.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_their_keep_are_deleted_while_serving_and_a_tenant_of_its_own_keeps_them() {
    let server = provider().await;
    let acme = TenantSpec::new("acme", KEY, project(), binding(&server));
    let mut archive = TenantSpec::new("archive", ARCHIVE_KEY, project(), binding(&server));
    archive.trace_keep = Some("forever");
    let deployment = Deployment::with_trace(&[acme, archive], "keep = \"2s\"\nbatch_ms = 5");
    let mut ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let old = turns_until_refused(&ctxd, 0, 1, 32).await;
    assert_eq!(old.answered.len(), 32);
    let mut kept = Vec::new();
    for i in 0..8 {
        let (status, body) = turn(&ctxd, ARCHIVE_KEY, request(i)).await;
        assert_eq!(status, 200, "{body}");
        kept.push(body["turnId"].as_str().unwrap().to_owned());
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    // Checked every 200 ms (a tenth of the shortest keep): acme's turns go within a
    // check or two of passing their keep; archive keeps its turns.
    let store = deployment.store();
    let deadline = Instant::now() + Duration::from_secs(10);
    while old.answered.iter().any(|turn_id| has_turn(&store, turn_id)) {
        assert!(Instant::now() < deadline, "old turns were not pruned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for turn_id in &kept {
        assert!(has_turn(&store, turn_id), "archive keeps {turn_id}");
    }
    let exported = metrics_of(&ctxd).await;
    assert!(
        exported.contains(&format!("ctxd_trace_records_pruned_total {}", 32 * 5)),
        "32 turns of 4 provider records each: {exported}"
    );
    assert!(
        exported.contains("ctxd_trace_oldest_record_age_seconds "),
        "{exported}"
    );
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_prune_counts_then_deletes_what_started_before_the_age() {
    let (_server, deployment, mut ctxd) = serve("batch_ms = 5").await;
    let old = turns_until_refused(&ctxd, 0, 1, 48).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let recent = turns_until_refused(&ctxd, 100, 1, 16).await;
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
    let store = deployment.store();
    let prune = |extra: &[&str]| {
        ctxd_cli()
            .args([
                "traces",
                "prune",
                "--store",
                store.to_str().unwrap(),
                "--older-than",
                "3s",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let dry = prune(&["--dry-run"]);
    assert!(dry.status.success(), "{}", stderr_of(&dry));
    assert_eq!(
        stdout_of(&dry),
        "acme: 48 turn records, 192 provider records, 0 handle operations would be deleted\n\
         total: 48 turn records, 192 provider records, 0 handle operations would be deleted\n"
    );
    let reader = TraceReader::open(&store, None).unwrap();
    assert_eq!(
        reader.counts().unwrap().turns,
        64,
        "a dry run deletes nothing"
    );
    let done = prune(&[]);
    assert!(done.status.success(), "{}", stderr_of(&done));
    assert!(
        stdout_of(&done).ends_with(
            "total: 48 turn records, 192 provider records, 0 handle operations deleted\n"
        ),
        "{}",
        stdout_of(&done)
    );
    assert_eq!(reader.counts().unwrap().turns, 16);
    assert!(!has_turn(&store, &old.answered[0]));
    assert!(has_turn(&store, &recent.answered[0]));
    let unknown = prune(&["--tenant", "globex"]);
    assert!(!unknown.status.success());
    assert!(
        stderr_of(&unknown).contains("--tenant \"globex\": the trace store"),
        "{}",
        stderr_of(&unknown)
    );
    let bad = ctxd_cli()
        .args([
            "traces",
            "prune",
            "--store",
            store.to_str().unwrap(),
            "--older-than",
            "soon",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        stderr_of(&bad).contains("--older-than"),
        "{}",
        stderr_of(&bad)
    );
}
