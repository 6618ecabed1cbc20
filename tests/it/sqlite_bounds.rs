//! Memory of a real `ctxd serve` answering SQLite lookups whose values are far larger
//! than any answer may be: bounded inside SQLite, whatever the query builds.

use crate::server::{Ctxd, Deployment, TenantSpec, layer_status, provider, turn};
use serde_json::json;

const KEY: &str = "bounds-test-key";

/// A provider whose every answer is one 400 MB value: `hex()` of a 200 MB blob.
fn oversize_deployment() -> Deployment {
    let project = json!({
        "id": "bounds", "version": "1",
        "providers": [{"id": "blob", "name": "Blob", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "blob-layer", "name": "Blob", "bindings": [{"provider": "blob"}]}]
    })
    .to_string();
    let binding = concat!(
        "revision = \"r1\"\n",
        "[providers.blob]\n",
        "type = \"sqlite\"\n",
        "database = \"blob.db\"\n",
        "query = \"SELECT 'x' AS id, hex(zeroblob(200000000)) AS content WHERE ?1 = ?1\"\n",
        "version = \"v1\"\n",
        "timeout_ms = 10000\n",
        "max_concurrency = 8\n",
        "pool = { max_size = 8 }\n",
    );
    let deployment = Deployment::new(&[TenantSpec::new(KEY, KEY, project, binding.to_owned())]);
    let database = deployment.config.parent().unwrap().join("blob.db");
    rusqlite::Connection::open(&database)
        .unwrap()
        .execute_batch("CREATE TABLE unused (id TEXT);")
        .unwrap();
    deployment
}

/// The peak resident set of a process, in bytes, from `/proc/<pid>/status`.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_oversize_sqlite_values_fail_fast_with_bounded_memory() {
    let deployment = oversize_deployment();
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let turns = (0..8).map(|_| {
        turn(
            &ctxd,
            KEY,
            json!({"project": "bounds", "inputs": {"customerId": "CUST-1"}}),
        )
    });
    for (status, body) in futures_util::future::join_all(turns).await {
        assert_eq!(status, 200, "{body:#}");
        let blob = provider(&body, "blob");
        assert_eq!(blob["status"], "LIMIT_EXCEEDED", "{body:#}");
        assert_eq!(blob["detail"], "RESPONSE_TOO_LARGE", "{body:#}");
        assert_eq!(layer_status(&body, "blob-layer"), "UNAVAILABLE");
    }
    // Unbounded, one such call peaked near 1 GB (the 200 MB blob and its 400 MB hex),
    // and eight took 7 GB. Bounded, SQLite refuses the blob before building it: eight
    // calls cost little beyond the process's baseline of a few tens of MB. 256 MiB
    // leaves room for a debug build and allocator slack while catching any one value
    // being built whole.
    let peak = peak_rss(ctxd.pid());
    assert!(peak < 256 << 20, "peak RSS {} MiB", peak >> 20);
}
