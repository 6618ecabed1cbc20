//! Load bench: `ctxd serve` against a raw baseline, in the same run, on the same machine.
//!
//! ```text
//! cargo bench --bench load -- [--duration SECS] [--warmup SECS] [--concurrency N]
//!     [--providers 1,4,8] [--overhead-providers N|none] [--open-load FRACTION]
//!     [--rounds N] [--soak SECS] [--soak-providers N] [--skip-load] [--workers N]
//!     [--client-threads N] [--mock-threads N] [--compare-ctxd PATH]
//!     [--repeated FRACTION] [--repeated-providers N] [--postgres]
//!     [--provider-type http|rest] [--out DIR]
//! ```
//!
//! - **Mock providers**: one hand-written HTTP/1.1 `context-provider.v1` server per
//!   provider (keep-alive, no delay), each on its own `127.0.0.1` port, all on their own
//!   tokio runtime (`bench-mock` threads). `describe` and `lookup` are answered with
//!   pre-built bytes: one small item.
//! - **Provider type** (`--provider-type`, default `http`): how ctxd's bindings reach the
//!   mocks. `http`: the `context-provider.v1` contract, a `POST` per lookup. `rest`: the
//!   same mocks as a JSON API, a `GET /context/customers/<value>` per lookup with a bearer
//!   token, the answer mapped by JSONPath (items, id, title, content, updated_at, two
//!   metadata fields). The baselines make the same calls either way (a `POST` per
//!   lookup), so with `rest` the figure to read is ctxd ÷ compare.
//! - **ctxd**: the release binary (`CARGO_BIN_EXE_ctxd`, built by `cargo bench`) as a
//!   child process on `127.0.0.1:0`, with a temp deployment: one tenant, a Project with
//!   N providers each behind one optional layer, a Binding pointing provider `pK` to
//!   mock K (bearer secret from the environment), traces on with the default writer
//!   (SQLite store in the temp dir, under `target/bench/`).
//! - **Driver**: a closed loop of `concurrency` tasks (`bench-client` threads, reqwest
//!   with a keep-alive pool, HTTP/1.1) sending turns for `duration` after `warmup`;
//!   every latency is recorded in µs.
//! - **Interleaving**: the sides of a phase are measured in `--rounds` slices of
//!   `duration / rounds`, each after its own warm-up, in order A B … then … B A, so
//!   drift on the shared machine falls on every side alike.
//! - **Raw baseline**: the same client and loop; each "turn" POSTs the same lookup
//!   bodies (same bearer header) to the N mocks concurrently, reads and parses each
//!   answer as `LookupResponse` — no gating, bounds or secret checks, rendering,
//!   response building or tracing, and one HTTP hop fewer.
//! - **Same-hop baseline** (`load/same_hop.rs`): a minimal actix-web + reqwest turn server
//!   in its own process (this binary started again, so allocating with jemalloc as ctxd
//!   does) that takes the same turn request, makes the same N lookups concurrently,
//!   parses them and answers JSON with the fields of ctxd's answer it has at hand, about
//!   its size (`--same-hop-client ctxd`: on ctxd's own client): a third side of every
//!   closed-loop phase, so the ratio against it is what ctxd adds over its network work. The
//!   closed-loop phases run at 1, 2, 4, 8 and 16 providers by default and draw the
//!   scaling curve (`load/scaling.rs`, `DIR/scaling.svg`).
//! - **Half saturation** (at `--overhead-providers`, default 4): an open loop at half of
//!   ctxd's closed-loop throughput (`--open-load FRACTION` sets another fraction: above
//!   1, how ctxd holds up past saturation), for ctxd and for the baseline; ctxd's
//!   `/metrics` histograms are scraped before and after every ctxd phase, and the p99 of
//!   `ctxd_coordinator_overhead_seconds` is the upper bound of the bucket holding the
//!   99th percentile of the deltas. While ctxd serves no `/metrics`, the client-side
//!   added latency (ctxd p99 − baseline p99 at the same rate) is reported instead.
//! - **CPU and RSS**: `/proc/<ctxd>/stat` and per-thread `/proc/self/task/*/stat`
//!   (client and mock threads by name; ctxd's trace writer thread from
//!   `/proc/<ctxd>/task/*/stat`) at the start and end of each measured window;
//!   peak RSS from `VmHWM` after resetting it (`clear_refs` 5) at the window start, with
//!   `VmRSS` sampled every 250 ms as a fallback.
//! - **Compare** (`--compare-ctxd PATH`): another ctxd binary (a build of the previous
//!   commit, say) as a third side of every closed-loop phase, interleaved with ctxd and
//!   the baseline (A B C C B A …), started fresh per provider count with the same
//!   deployment in its own temp dir and trace store. Its row is labelled `compare`, and
//!   a line gives ctxd's CPU per turn ÷ compare's and the throughput ratio: this is how
//!   a change to the turn path reports its before/after CPU per turn, since absolute
//!   figures drift between runs and same-run ratios hold. Not in the half-saturation
//!   phase or the soak.
//! - **Repeated values** (`--repeated FRACTION`, e.g. `0.9`): two fresh ctxd at
//!   `--repeated-providers` (default 4), one whose binding caches every provider
//!   (`cache = { ttl = "60s" }`, side `cached`) and one without, interleaved, both
//!   driven with turns of which FRACTION ask one of [`HOT_VALUES`] values and the rest
//!   values not asked before. The mocks count the lookups they receive (describes
//!   apart): each side's upstream lookups over its measured window, per provider call
//!   of its turns, show what the cache and the coalescing of identical lookups save.
//!   Runs with `--skip-load` too (then the figures go to `DIR/repeated.json`).
//! - **PostgreSQL** (`--postgres`): a fresh ctxd whose 4 providers are `postgres`
//!   bindings, one query each against the server on 127.0.0.1:5432 (database `test`,
//!   schema `ctxd_load_bench`, 10 000 customers per table), interleaved with its own raw
//!   baseline: the same 4 queries through the same driver and pool sizes, without ctxd
//!   (see `load/postgres.rs`). Runs with `--skip-load` too.
//! - **Soak** (`--soak SECS`): a fresh ctxd at `--soak-providers` (default 4), closed
//!   loop for SECS, ctxd's `VmRSS` sampled every second. "Flat": the mean of the last
//!   5 s, and every sample after the 10 s warm-up, within 5 % of the mean of the 5 s
//!   right after it.
//!
//! Output: a table on standard output, `DIR/results.json` with every figure
//! (`DIR/soak.json` with `--skip-load`; with `--compare-ctxd`, a `compare` object per
//! provider count: the binary, its figures and both ratios), `DIR/latency.svg`
//! (percentile curves, ctxd vs baseline, and compare, per provider count) and, with a
//! soak, `DIR/soak.svg`. The machine has 2 cores, shared by the client, the mocks and
//! ctxd: absolute figures drift, same-run ratios hold. See docs/PERFORMANCE.md.

#[path = "load/postgres.rs"]
mod postgres;
#[path = "load/same_hop.rs"]
mod same_hop;
#[path = "load/scaling.rs"]
mod scaling;

use ctxd::contract::{LookupRequest, LookupResponse};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::time::Instant;

/// The allocator the `ctxd` binary ships with (`src/main.rs`): the same-hop server is
/// this binary started again, so the baseline allocates as ctxd does.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The open-loop phase's default rate as a fraction of ctxd's closed-loop throughput:
/// the fraction its overhead target is read at.
const HALF_SATURATION: f64 = 0.5;
const API_KEY: &str = "ctxd-load-bench-key";
const PROVIDER_SECRET: &str = "load-bench-provider-secret-5d1c9a";
const SECRET_ENV: &str = "CTXD_LOAD_PROVIDER_TOKEN";
const DIGEST_KEY_ENV: &str = "CTXD_LOAD_DIGEST_KEY";
/// Lookup values cycle over this many customers.
const CUSTOMERS: u64 = 10_000;
/// The values repeated turns ask for (`--repeated`).
const HOT_VALUES: u64 = 100;
/// The requested `limit` of every lookup (the Project's `maxItems`).
const LIMIT: u32 = 5;
/// The soak's warm-up, after which RSS must stay flat.
const SOAK_WARMUP: Duration = Duration::from_secs(10);
/// "Flat": RSS growth after the warm-up below this fraction.
const FLAT_GROWTH: f64 = 0.05;
/// Samples (seconds) averaged for the soak's RSS "after warm-up" and "end" figures.
const SOAK_WINDOW: usize = 5;
/// Most open-loop requests outstanding at once before new ones are counted as dropped.
const OPEN_LOOP_MAX_OUTSTANDING: usize = 4096;

// ---------------------------------------------------------------------------------------
// Arguments.

struct Args {
    duration: Duration,
    warmup: Duration,
    concurrency: usize,
    providers: Vec<usize>,
    overhead_providers: Option<usize>,
    /// The open-loop phase's rate, as a fraction of ctxd's closed-loop throughput.
    open_load: f64,
    soak: Option<Duration>,
    soak_providers: usize,
    skip_load: bool,
    rounds: usize,
    workers: Option<usize>,
    client_threads: usize,
    mock_threads: usize,
    /// A second ctxd binary measured beside the bench's own (`--compare-ctxd`).
    compare_ctxd: Option<PathBuf>,
    /// The fraction of turns asking for a repeated value in the cache run (`--repeated`).
    repeated: Option<f64>,
    repeated_providers: usize,
    /// Run the PostgreSQL variant (`--postgres`).
    postgres: bool,
    /// The same-hop server's upstream client (`--same-hop-client`).
    same_hop_client: same_hop::SameHopClient,
    /// How ctxd's bindings reach the mocks (`--provider-type`).
    provider_type: ProviderType,
    out: PathBuf,
}

/// The provider type of the mock bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProviderType {
    Http,
    Rest,
}

impl ProviderType {
    fn parse(text: &str) -> Option<ProviderType> {
        match text {
            "http" => Some(ProviderType::Http),
            "rest" => Some(ProviderType::Rest),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ProviderType::Http => "http",
            ProviderType::Rest => "rest",
        }
    }
}

/// The run's `--provider-type`, set once by [`parse_args`].
static PROVIDER_TYPE: std::sync::OnceLock<ProviderType> = std::sync::OnceLock::new();

fn usage() -> ! {
    eprintln!(
        "usage: cargo bench --bench load -- [--duration SECS] [--warmup SECS] [--concurrency N] \
         [--providers 1,4,8] [--overhead-providers N|none] [--open-load FRACTION] [--rounds N] [--soak SECS] [--soak-providers N] \
         [--skip-load] [--workers N] [--client-threads N] [--mock-threads N] [--compare-ctxd PATH] \
         [--repeated FRACTION] [--repeated-providers N] [--postgres] [--same-hop-client reqwest|ctxd] \
         [--provider-type http|rest] [--out DIR]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(1),
        concurrency: 64,
        providers: vec![1, 2, 4, 8, 16],
        overhead_providers: Some(4),
        open_load: HALF_SATURATION,
        soak: None,
        soak_providers: 4,
        skip_load: false,
        rounds: 2,
        workers: None,
        client_threads: 2,
        mock_threads: 2,
        compare_ctxd: None,
        repeated: None,
        repeated_providers: 4,
        postgres: false,
        same_hop_client: same_hop::SameHopClient::Reqwest,
        provider_type: ProviderType::Http,
        out: target_dir().join("bench/load"),
    };
    let mut it = std::env::args().skip(1);
    let seconds = |v: Option<String>| -> Duration {
        v.and_then(|v| v.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or_else(|| usage())
    };
    let number = |v: Option<String>| -> usize {
        v.and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| usage())
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            // `cargo bench` passes `--bench` to every harness-less bench.
            "--bench" => {}
            "--duration" => args.duration = seconds(it.next()),
            "--warmup" => args.warmup = seconds(it.next()),
            "--concurrency" => args.concurrency = number(it.next()),
            "--providers" => {
                args.providers = it
                    .next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(|n| number(Some(n.trim().to_owned())))
                    .collect()
            }
            "--overhead-providers" => {
                args.overhead_providers = match it.next().as_deref() {
                    Some("none") => None,
                    other => Some(number(other.map(str::to_owned))),
                }
            }
            "--open-load" => {
                let fraction = it.next().and_then(|v| v.parse::<f64>().ok());
                args.open_load = fraction
                    .filter(|f| *f > 0.0 && *f <= 10.0)
                    .unwrap_or_else(|| usage())
            }
            "--soak" => args.soak = Some(seconds(it.next())),
            "--soak-providers" => args.soak_providers = number(it.next()),
            "--skip-load" => args.skip_load = true,
            "--rounds" => args.rounds = number(it.next()),
            "--workers" => args.workers = Some(number(it.next())),
            "--client-threads" => args.client_threads = number(it.next()),
            "--mock-threads" => args.mock_threads = number(it.next()),
            "--compare-ctxd" => {
                let path = PathBuf::from(it.next().unwrap_or_else(|| usage()));
                if !path.is_file() {
                    eprintln!("--compare-ctxd: {} is not a file", path.display());
                    usage()
                }
                args.compare_ctxd = Some(path)
            }
            "--repeated" => {
                let fraction = it.next().and_then(|v| v.parse::<f64>().ok());
                args.repeated = Some(
                    fraction
                        .filter(|f| (0.0..=1.0).contains(f))
                        .unwrap_or_else(|| usage()),
                )
            }
            "--repeated-providers" => args.repeated_providers = number(it.next()),
            "--postgres" => args.postgres = true,
            "--same-hop-client" => {
                args.same_hop_client = it
                    .next()
                    .and_then(|c| same_hop::SameHopClient::parse(&c))
                    .unwrap_or_else(|| usage())
            }
            "--provider-type" => {
                args.provider_type = it
                    .next()
                    .and_then(|t| ProviderType::parse(&t))
                    .unwrap_or_else(|| usage())
            }
            "--out" => args.out = PathBuf::from(it.next().unwrap_or_else(|| usage())),
            "-h" | "--help" => usage(),
            other => {
                eprintln!("unknown argument {other:?}");
                usage()
            }
        }
    }
    PROVIDER_TYPE
        .set(args.provider_type)
        .expect("the arguments are parsed once");
    args
}

/// What the open-loop phase is called: half saturation at the default fraction.
fn open_load_label(fraction: f64) -> String {
    if fraction == HALF_SATURATION {
        "half saturation".to_owned()
    } else {
        format!("{fraction} × saturation")
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

// ---------------------------------------------------------------------------------------
// Mock providers: minimal HTTP/1.1 with keep-alive, pre-built answers.

fn http_response(body: &str) -> Arc<[u8]> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into()
}

struct Mock {
    address: SocketAddr,
    requests: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
}

/// Lookups (not describes) received by every mock together: the upstream calls.
type Lookups = Arc<AtomicU64>;

async fn start_mock(index: usize, lookups: Lookups) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("mock binds");
    let address = listener.local_addr().unwrap();
    let lookup = http_response(
        &json!({
            "contract": "context-provider.v1",
            "version": format!("mock-{index}"),
            "currentness": "CURRENT",
            "items": [{
                "id": format!("REC-{index:04}"),
                "title": "Account state",
                "content": "Enterprise customer since 2021; 240 seats in EU-Central; renewal due 2027-01-31; no open escalations.",
                "metadata": {"plan": "Enterprise", "region": "EU-Central"},
                "updatedAt": "2026-11-28T09:14:00Z"
            }]
        })
        .to_string(),
    );
    let describe = http_response(
        &json!({"contract": "context-provider.v1", "version": format!("mock-{index}"),
                "capabilities": ["describe", "lookup"]})
        .to_string(),
    );
    let requests = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&requests);
    let accepted = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            accepted.fetch_add(1, Ordering::Relaxed);
            let (lookup, describe, counter, lookups) = (
                Arc::clone(&lookup),
                Arc::clone(&describe),
                Arc::clone(&counter),
                Arc::clone(&lookups),
            );
            tokio::spawn(serve_connection(stream, lookup, describe, counter, lookups));
        }
    });
    Mock {
        address,
        requests,
        connections,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> usize {
    let head = String::from_utf8_lossy(head);
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0)
}

async fn serve_connection(
    mut stream: TcpStream,
    lookup: Arc<[u8]>,
    describe: Arc<[u8]>,
    counter: Arc<AtomicU64>,
    lookups: Lookups,
) {
    let _ = stream.set_nodelay(true);
    let mut buffer: Vec<u8> = Vec::with_capacity(8192);
    let mut scanned: usize = 0;
    loop {
        let head_end = loop {
            if let Some(pos) = find(&buffer[scanned.saturating_sub(3)..], b"\r\n\r\n") {
                break scanned.saturating_sub(3) + pos + 4;
            }
            scanned = buffer.len();
            match stream.read_buf(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let end = head_end + content_length(&buffer[..head_end]);
        while buffer.len() < end {
            match stream.read_buf(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let answer = if find(&buffer[head_end..end], b"\"describe\"").is_some() {
            &describe
        } else {
            lookups.fetch_add(1, Ordering::Relaxed);
            &lookup
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if stream.write_all(answer).await.is_err() {
            return;
        }
        buffer.drain(..end);
        scanned = 0;
    }
}

// ---------------------------------------------------------------------------------------
// ctxd as a child process, with a temp deployment.

fn project_json(providers: usize) -> String {
    let specs: Vec<Value> = (1..=providers)
        .map(|k| {
            json!({"id": format!("p{k}"), "name": format!("Provider {k}"),
                   "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"},
                   "maxItems": LIMIT})
        })
        .collect();
    let layers: Vec<Value> = (1..=providers)
        .map(|k| {
            json!({"id": format!("p{k}-layer"), "name": format!("Layer of provider {k}"),
                   "bindings": [{"provider": format!("p{k}")}], "required": false})
        })
        .collect();
    json!({"id": "load", "version": "1.0.0", "budget": {"maxBytes": 12000},
           "providers": specs, "layers": layers})
    .to_string()
}

/// One binding per provider, of the run's `--provider-type`. `max_concurrency` and the
/// idle pool are raised above the defaults (64 and 32) so that neither refuses or churns
/// connections at 64 concurrent turns; everything else is the default (timeout 1000 ms,
/// digest retention). With `cache`, every provider keeps answers for 60 s
/// (`[defaults.cache]`).
fn binding_toml(mocks: &[SocketAddr], cache: bool) -> String {
    let mut text = String::from(
        "revision = \"load-1\"\n\n[defaults]\nmax_concurrency = 1024\n\n[defaults.pool]\nmax_idle_per_host = 256\n",
    );
    if cache {
        text.push_str("\n[defaults.cache]\nttl = \"60s\"\n");
    }
    let rest = PROVIDER_TYPE.get() == Some(&ProviderType::Rest);
    for (k, address) in mocks.iter().enumerate() {
        if rest {
            let _ = write!(
                text,
                "\n[providers.p{k}]\ntype = \"rest\"\nendpoint = \"http://{address}/context\"\n\
                 version = \"mock-rest\"\npath = \"/customers/{{value}}\"\n\
                 auth = {{ type = \"bearer\", token_env = \"{SECRET_ENV}\" }}\n\n\
                 [providers.p{k}.mapping]\nitems = \"$.items\"\nid = \"$.id\"\ntitle = \"$.title\"\n\
                 content = \"$.content\"\nupdated_at = \"$.updatedAt\"\n\
                 metadata = {{ plan = \"$.metadata.plan\", region = \"$.metadata.region\" }}\n",
                k = k + 1
            );
        } else {
            let _ = write!(
                text,
                "\n[providers.p{}]\ntype = \"http\"\nendpoint = \"http://{address}/context\"\nsecret_env = \"{SECRET_ENV}\"\n",
                k + 1
            );
        }
    }
    text
}

fn config_toml() -> String {
    let hash = hex::encode(Sha256::digest(API_KEY.as_bytes()));
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace_ms = 10000\n\n\
         [trace]\nstore = \"sqlite:data/traces.db\"\ndigest_key_env = \"{DIGEST_KEY_ENV}\"\n\
         generate_digest_key = true\n\n[limits]\nmax_turn_ms = 10000\n\n\
         [[tenants]]\nid = \"load\"\napi_key_sha256 = \"{hash}\"\nmax_in_flight = 8192\n\n\
         [[tenants.projects]]\npath = \"project.json\"\nbinding = \"binding.toml\"\n"
    )
}

/// A ctxd build that serves turns in the bench: its own, or the `--compare-ctxd` one.
struct CtxdBinary {
    /// The side's name in the table and the JSON: `ctxd` or `compare`.
    label: &'static str,
    path: PathBuf,
}

impl CtxdBinary {
    /// The release binary `cargo bench` built from this tree, or the one
    /// `CTXD_BENCH_CTXD` names (to measure a before/after in both seats, see
    /// docs/PERFORMANCE.md).
    fn bench() -> CtxdBinary {
        CtxdBinary {
            label: "ctxd",
            path: std::env::var_os("CTXD_BENCH_CTXD")
                .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ctxd")), PathBuf::from),
        }
    }

    fn compare(path: PathBuf) -> CtxdBinary {
        CtxdBinary {
            label: "compare",
            path,
        }
    }

    /// The bench's own binary, serving with every provider cached.
    fn cached() -> CtxdBinary {
        CtxdBinary {
            label: "cached",
            ..CtxdBinary::bench()
        }
    }
}

/// What a ctxd side serves: whether its binding caches, which values its turns ask.
#[derive(Clone, Copy)]
struct Workload {
    cache: bool,
    values: Values,
    upstream: Upstream,
}

impl Workload {
    const PLAIN: Workload = Workload {
        cache: false,
        values: Values::Cycle,
        upstream: Upstream::Mocks,
    };
}

/// What serves a ctxd side's providers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// The HTTP mocks.
    Mocks,
    /// `postgres` bindings against the real server ([`postgres`]).
    Postgres,
}

/// Which lookup value turn `i` asks for.
#[derive(Clone, Copy)]
enum Values {
    /// Cycling over [`CUSTOMERS`] values: none repeats within 10 000 turns.
    Cycle,
    /// This fraction of turns (spread evenly over every thousand) ask one of
    /// [`HOT_VALUES`] values; the others ask values no turn asked before (until the
    /// 9 900 others are used up).
    Repeated(f64),
}

impl Values {
    fn value(self, i: u64) -> String {
        let number = match self {
            Values::Cycle => i % CUSTOMERS,
            Values::Repeated(fraction) => {
                let hot = (fraction * 1000.0).round() as u64;
                let (round, place) = (i / 1000, i % 1000);
                if place < hot {
                    i % HOT_VALUES
                } else {
                    let cold = round * (1000 - hot) + (place - hot);
                    HOT_VALUES + cold % (CUSTOMERS - HOT_VALUES)
                }
            }
        };
        format!("CUST-{number:04}")
    }
}

struct CtxdProcess {
    label: &'static str,
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl CtxdProcess {
    /// Every binary gets the same deployment, each in its own temp dir (and trace store).
    fn start(
        binary: &CtxdBinary,
        mocks: &[SocketAddr],
        workers: Option<usize>,
        workload: Workload,
    ) -> CtxdProcess {
        let bench_dir = target_dir().join("bench");
        std::fs::create_dir_all(&bench_dir).unwrap();
        let dir = tempfile::tempdir_in(&bench_dir).unwrap();
        std::fs::write(dir.path().join("project.json"), project_json(mocks.len())).unwrap();
        let binding = match workload.upstream {
            Upstream::Mocks => binding_toml(mocks, workload.cache),
            Upstream::Postgres => postgres::binding_toml(),
        };
        std::fs::write(dir.path().join("binding.toml"), binding).unwrap();
        let config = dir.path().join("ctxd.toml");
        std::fs::write(&config, config_toml()).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let mut command = Command::new(&binary.path);
        command
            .current_dir(dir.path())
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .env(SECRET_ENV, PROVIDER_SECRET)
            .env(postgres::DSN_ENV, postgres::DSN)
            .env_remove(DIGEST_KEY_ENV)
            .env_remove("CTXD_LOG")
            .env_remove("CTXD_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(workers) = workers {
            command.args(["--workers", &workers.to_string()]);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{} ({}) starts: {e}", binary.label, binary.path.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(address) = line.strip_prefix("ctxd listening on ") {
                    let _ = tx.send(address.to_owned());
                }
            }
        });
        eprintln!(
            "{} pid {} ({} providers)",
            binary.label,
            child.id(),
            mocks.len()
        );
        let mut process = CtxdProcess {
            label: binary.label,
            child,
            base: String::new(),
            dir,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => process.base = base,
            Err(_) => process.fail("did not print its address within 60 s"),
        }
        process
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let logs = self.logs();
        let tail: Vec<&str> = logs.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let label = self.label;
        panic!(
            "{label} {why}; {label}'s last log lines:\n{}",
            tail.join("\n")
        );
    }

    /// Until `/readyz` answers 200 (every provider probed once).
    fn wait_ready(&mut self, runtime: &Runtime, client: &reqwest::Client) {
        let url = self.url("/readyz");
        let ready = runtime.block_on(async {
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                if let Ok(response) = client.get(&url).send().await
                    && response.status() == 200
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        });
        if !ready {
            self.fail("was not ready within 30 s");
        }
    }

    /// SIGTERM, wait for the ordered shutdown (the trace writer drains), then count the
    /// turns in the trace store and measure its files.
    fn stop(mut self) -> (Option<u64>, Option<u64>) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = std::time::Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if started.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    eprintln!("{} did not exit within 60 s of SIGTERM; killed", self.label);
                    return (None, None);
                }
            }
        }
        let store = self.dir.path().join("data/traces.db");
        let turns = ctxd::trace::store::TraceReader::open(&store, None)
            .and_then(|reader| reader.counts())
            .map(|counts| counts.turns)
            .ok();
        // The database and what is left of its WAL after the final checkpoint.
        let data = self.dir.path().join("data");
        let size = |file: &str| std::fs::metadata(data.join(file)).map(|m| m.len());
        let bytes = size("traces.db")
            .ok()
            .map(|db| db + size("traces.db-wal").unwrap_or(0));
        (turns, bytes)
    }
}

impl Drop for CtxdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A ready ctxd and the target that drives it.
struct ServedCtxd {
    process: CtxdProcess,
    target: Arc<Target>,
    /// Shared with the target: the turns answered `200`, warm-up included.
    answered: Arc<AtomicU64>,
}

impl ServedCtxd {
    /// Starts `binary` against `mocks` and waits for `/readyz` (polled with
    /// `ready_client`); `client` sends the turns.
    fn start(
        binary: &CtxdBinary,
        mocks: &[SocketAddr],
        workers: Option<usize>,
        runtime: &Runtime,
        ready_client: &reqwest::Client,
        client: reqwest::Client,
        workload: Workload,
    ) -> ServedCtxd {
        let mut process = CtxdProcess::start(binary, mocks, workers, workload);
        process.wait_ready(runtime, ready_client);
        let answered = Arc::new(AtomicU64::new(0));
        let target = Arc::new(Target {
            client,
            values: workload.values,
            asked: AtomicU64::new(0),
            side: Side::Ctxd {
                label: binary.label,
                pid: process.pid(),
                base: process.base.clone(),
                url: process.url("/v1/turns"),
                providers: mocks.len(),
                answered: Arc::clone(&answered),
            },
        });
        ServedCtxd {
            process,
            target,
            answered,
        }
    }

    /// Stops ctxd and counts what its trace store holds against what it answered.
    fn stop(self) -> TraceCheck {
        let (stored, store_bytes) = self.process.stop();
        TraceCheck {
            stored,
            store_bytes,
            answered: self.answered.load(Ordering::Relaxed),
        }
    }
}

/// Every turn a ctxd answered must be in its trace store after the ordered shutdown.
struct TraceCheck {
    /// `200` answers, warm-up included.
    answered: u64,
    /// Turns in the trace store; `None` when it could not be read.
    stored: Option<u64>,
    /// Bytes of the store's files after the shutdown.
    store_bytes: Option<u64>,
}

impl TraceCheck {
    fn describe(&self) -> String {
        let per_turn = self
            .bytes_per_turn()
            .map_or("?".to_owned(), |bytes| format!("{bytes:.0}"));
        format!(
            "{} turns answered (warm-up included), {} in the trace store; store bytes/turn {per_turn}",
            self.answered,
            self.stored.map_or("?".to_owned(), |t| t.to_string())
        )
    }

    /// The trace store's size on disk per stored turn.
    fn bytes_per_turn(&self) -> Option<f64> {
        match (self.store_bytes, self.stored) {
            (Some(bytes), Some(turns)) if turns > 0 => Some(bytes as f64 / turns as f64),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// What one "turn" is, on each side.

fn client(pool: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .pool_max_idle_per_host(pool)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("the bench client builds")
}

enum Side {
    Ctxd {
        /// `ctxd`, or `compare` for the `--compare-ctxd` binary.
        label: &'static str,
        /// Whose CPU and RSS the phase measures.
        pid: u32,
        /// Where its `/metrics` are scraped.
        base: String,
        url: String,
        providers: usize,
        /// `200` answers, warm-up included: each must have its trace in the store.
        answered: Arc<AtomicU64>,
    },
    Raw {
        urls: Vec<String>,
    },
    /// The PostgreSQL variant's baseline: the same queries through the same driver.
    RawPostgres(postgres::Raw),
}

struct Target {
    client: reqwest::Client,
    values: Values,
    /// Turns this target has sent, every slice and warm-up included: repeated values
    /// are drawn by it, so a value "not asked before" is one no earlier slice asked.
    asked: AtomicU64,
    side: Side,
}

impl Target {
    fn name(&self) -> &'static str {
        match self.side {
            Side::Ctxd { label, .. } => label,
            Side::Raw { .. } | Side::RawPostgres(_) => "baseline",
        }
    }

    /// The ctxd process serving this side's turns: `(pid, base URL)`.
    fn process(&self) -> Option<(u32, &str)> {
        match &self.side {
            Side::Ctxd { pid, base, .. } => Some((*pid, base)),
            Side::Raw { .. } | Side::RawPostgres(_) => None,
        }
    }

    async fn turn(&self, i: u64) -> Result<(), String> {
        let value = match self.values {
            Values::Cycle => self.values.value(i),
            Values::Repeated(_) => self
                .values
                .value(self.asked.fetch_add(1, Ordering::Relaxed)),
        };
        match &self.side {
            Side::Ctxd {
                label,
                url,
                providers,
                answered,
                ..
            } => {
                let body = json!({"project": "load", "objective": "support",
                                  "consumer": "load-bench", "inputs": {"customerId": value}});
                let response = self
                    .client
                    .post(url)
                    .bearer_auth(API_KEY)
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| format!("{label}: {e}"))?;
                let status = response.status().as_u16();
                let bytes = response
                    .bytes()
                    .await
                    .map_err(|e| format!("{label}: {e}"))?;
                if status != 200 {
                    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
                    return Err(format!("{label} answered {status}: {text}"));
                }
                answered.fetch_add(1, Ordering::Relaxed);
                let body: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{label}: bad JSON: {e}"))?;
                let entries = body["providers"].as_array().map_or(&[][..], Vec::as_slice);
                let ok = entries.iter().filter(|p| p["status"] == "OK").count();
                if ok != *providers {
                    let bad = entries.iter().find(|p| p["status"] != "OK");
                    return Err(format!(
                        "{ok} of {providers} providers OK; first other: {}",
                        bad.map_or("none".to_owned(), |p| p.to_string())
                    ));
                }
                Ok(())
            }
            Side::Raw { urls } => {
                let calls: Vec<Call<'_, Result<(), String>>> = urls
                    .iter()
                    .enumerate()
                    .map(|(k, url)| {
                        let value = value.as_str();
                        Box::pin(async move {
                            let response = mock_lookup(&self.client, url, k, value)
                                .send()
                                .await
                                .map_err(|e| format!("mock: {e}"))?;
                            let status = response.status().as_u16();
                            let bytes = response.bytes().await.map_err(|e| format!("mock: {e}"))?;
                            if status != 200 {
                                return Err(format!("mock answered {status}"));
                            }
                            let answer: LookupResponse = serde_json::from_slice(&bytes)
                                .map_err(|e| format!("mock: bad JSON: {e}"))?;
                            if answer.items.len() != 1 {
                                return Err("mock: not one item".to_owned());
                            }
                            Ok(())
                        }) as Call<'_, _>
                    })
                    .collect();
                join_all(calls).await.into_iter().collect()
            }
            Side::RawPostgres(raw) => raw.turn(&value).await,
        }
    }
}

/// A boxed provider call of the baseline.
type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future until all are done (what `futures::future::join_all` does for
/// small sets), without another dependency.
async fn join_all<T>(futures: Vec<Call<'_, T>>) -> Vec<T> {
    let mut futures: Vec<Option<Call<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (slot, result) in futures.iter_mut().zip(results.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *result = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(results.iter_mut().map(|r| r.take().unwrap()).collect())
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Drivers.

#[derive(Default)]
struct Recorded {
    /// Latencies (µs) of the turns that completed inside the measured window.
    latencies_us: Vec<u32>,
    /// Failed turns inside the window.
    errors: u64,
    /// Failed turns during the warm-up.
    warmup_errors: u64,
    first_error: Option<String>,
    /// Open loop: requests not sent because too many were outstanding.
    dropped: u64,
    /// Open loop: how late requests were dispatched against their schedule (µs).
    lag_us: Vec<u32>,
}

impl Recorded {
    fn merge(&mut self, other: Recorded) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.warmup_errors += other.warmup_errors;
        self.dropped += other.dropped;
        self.lag_us.extend(other.lag_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// `concurrency` tasks, each sending its next turn as soon as the last one answered,
/// until `t1`. Turns completing in `[t0, t1]` are measured.
async fn closed_loop(
    target: Arc<Target>,
    concurrency: usize,
    t0: Instant,
    t1: Instant,
) -> Recorded {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (target, next) = (Arc::clone(&target), Arc::clone(&next));
            tokio::spawn(async move {
                let mut recorded = Recorded {
                    latencies_us: Vec::with_capacity(16_384),
                    ..Recorded::default()
                };
                loop {
                    let started = Instant::now();
                    if started >= t1 {
                        break;
                    }
                    let result = target.turn(next.fetch_add(1, Ordering::Relaxed)).await;
                    let ended = Instant::now();
                    let measured = ended >= t0 && ended <= t1;
                    match result {
                        Ok(()) if measured => {
                            recorded.latencies_us.push(micros(ended - started));
                        }
                        Ok(()) => {}
                        Err(error) => {
                            if measured {
                                recorded.errors += 1;
                            } else {
                                recorded.warmup_errors += 1;
                            }
                            recorded.first_error.get_or_insert(error);
                        }
                    }
                }
                recorded
            })
        })
        .collect();
    let mut all = Recorded::default();
    for task in tasks {
        all.merge(task.await.expect("a driver task does not panic"));
    }
    all
}

/// A fixed rate from `start` to `t1`: request `i` is due at `start + i / rate`; it is
/// sent at once when due (the timer has 1 ms granularity, so dispatch lags up to ~1 ms:
/// latency is measured from the actual dispatch and the lag reported separately).
/// Requests dispatched in `[t0, t1)` are measured.
async fn open_loop(
    target: Arc<Target>,
    rate: f64,
    start: Instant,
    t0: Instant,
    t1: Instant,
) -> Recorded {
    let outstanding = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(Mutex::new(Recorded::default()));
    let mut dropped = 0;
    let mut lag_us = Vec::new();
    let mut i: u64 = 0;
    loop {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        if due >= t1 {
            break;
        }
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        let dispatched = Instant::now();
        let measured = dispatched >= t0;
        if outstanding.load(Ordering::Relaxed) >= OPEN_LOOP_MAX_OUTSTANDING {
            if measured {
                dropped += 1;
            }
            i += 1;
            continue;
        }
        if measured {
            lag_us.push(micros(dispatched - due));
        }
        outstanding.fetch_add(1, Ordering::Relaxed);
        let (target, outstanding, shared) = (
            Arc::clone(&target),
            Arc::clone(&outstanding),
            Arc::clone(&shared),
        );
        tokio::spawn(async move {
            let result = target.turn(i).await;
            let latency = micros(dispatched.elapsed());
            {
                let mut recorded = shared.lock().unwrap();
                match result {
                    Ok(()) if measured => recorded.latencies_us.push(latency),
                    Ok(()) => {}
                    Err(error) => {
                        if measured {
                            recorded.errors += 1;
                        } else {
                            recorded.warmup_errors += 1;
                        }
                        recorded.first_error.get_or_insert(error);
                    }
                }
            }
            outstanding.fetch_sub(1, Ordering::Relaxed);
        });
        i += 1;
    }
    let waited = Instant::now();
    while outstanding.load(Ordering::Relaxed) > 0 && waited.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut recorded = std::mem::take(&mut *shared.lock().unwrap());
    recorded.dropped = dropped;
    recorded.lag_us = lag_us;
    recorded
}

// ---------------------------------------------------------------------------------------
// CPU, RSS, machine.

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime (ticks) from a `/proc/…/stat` file.
fn stat_ticks(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// CPU ticks of this process's threads whose name starts with `prefix`.
fn thread_ticks(prefix: &str) -> u64 {
    threads_ticks_of("self", prefix)
}

/// CPU ticks of process `pid`'s threads whose name starts with `prefix`.
fn threads_ticks_of(pid: &str, prefix: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with(prefix))
        })
        .filter_map(|task| stat_ticks(&task.path().join("stat")))
        .sum()
}

/// `(busy, total)` ticks of the whole machine from `/proc/stat`.
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The trace writer's thread in a `ctxd` process: a prefix of its name, which the kernel
/// cuts to 15 bytes.
const WRITER_THREAD: &str = "ctxd-trace-wri";

#[derive(Clone, Copy, Default)]
struct CpuSnapshot {
    ctxd: u64,
    /// The trace writer thread of the ctxd process: SQLite's share, measured apart from
    /// the rest (its work per turn is steadier than the whole process's).
    writer: u64,
    client: u64,
    mock: u64,
    /// The whole bench process (client, mocks, the driver's main thread).
    bench: u64,
    busy: u64,
    total: u64,
}

fn cpu_snapshot(ctxd: Option<u32>) -> CpuSnapshot {
    let (busy, total) = machine_ticks();
    CpuSnapshot {
        ctxd: ctxd
            .and_then(|pid| stat_ticks(Path::new(&format!("/proc/{pid}/stat"))))
            .unwrap_or(0),
        writer: ctxd.map_or(0, |pid| threads_ticks_of(&pid.to_string(), WRITER_THREAD)),
        client: thread_ticks("bench-client"),
        mock: thread_ticks("bench-mock"),
        bench: stat_ticks(Path::new("/proc/self/stat")).unwrap_or(0),
        busy,
        total,
    }
}

/// `(VmRSS, VmHWM)` in KiB.
fn memory_kib(pid: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets the peak RSS (`VmHWM`) of a process; `false` when the kernel refuses.
fn reset_peak(pid: &str) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

// ---------------------------------------------------------------------------------------
// Prometheus histograms from `/metrics`.

const OVERHEAD_METRIC: &str = "ctxd_coordinator_overhead_seconds";
const TURN_METRIC: &str = "ctxd_turn_duration_seconds";
const PROVIDER_CALL_METRIC: &str = "ctxd_provider_call_duration_seconds";

/// A cumulative histogram summed over every label set but `le`.
#[derive(Debug, Clone, Default)]
struct Histogram {
    /// `(le, cumulative count)`, ascending `le`.
    buckets: Vec<(f64, f64)>,
    count: f64,
    sum: f64,
}

fn label(labels: &str, name: &str) -> Option<String> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let end = labels[start..].find('"')? + start;
    Some(labels[start..end].to_owned())
}

fn parse_histogram(text: &str, name: &str) -> Option<Histogram> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let (mut count, mut sum, mut seen) = (0.0, 0.0, false);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.trim().rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
        match metric.strip_prefix(name) {
            Some("_bucket") => {
                let le = match label(labels, "le").as_deref() {
                    Some("+Inf") => f64::INFINITY,
                    Some(le) => le.parse().unwrap_or(f64::NAN),
                    None => continue,
                };
                match buckets.iter_mut().find(|(b, _)| *b == le) {
                    Some(bucket) => bucket.1 += value,
                    None => buckets.push((le, value)),
                }
                seen = true;
            }
            Some("_count") => count += value,
            Some("_sum") => sum += value,
            _ => {}
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    seen.then_some(Histogram {
        buckets,
        count,
        sum,
    })
}

impl Histogram {
    /// Adds another window's deltas (same buckets).
    fn plus(&self, other: &Histogram) -> Histogram {
        let mut sum = self.clone();
        for &(le, c) in &other.buckets {
            match sum.buckets.iter_mut().find(|(b, _)| *b == le) {
                Some(bucket) => bucket.1 += c,
                None => sum.buckets.push((le, c)),
            }
        }
        sum.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        sum.count += other.count;
        sum.sum += other.sum;
        sum
    }

    fn minus(&self, before: &Histogram) -> Histogram {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c)
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c - earlier(le)))
                .collect(),
            count: self.count - before.count,
            sum: self.sum - before.sum,
        }
    }

    /// Upper bound (seconds) of the bucket holding quantile `q`.
    fn quantile_upper(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map_or(self.count, |b| b.1);
        if total <= 0.0 {
            return None;
        }
        self.buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= q * total)
            .map(|(le, _)| *le)
    }

    fn json(&self) -> Value {
        let bound = |q| self.quantile_upper(q).filter(|v| v.is_finite());
        json!({
            "count": self.count,
            "mean_seconds": (self.count > 0.0).then(|| self.sum / self.count),
            "p50_upper_bound_seconds": bound(0.50),
            "p90_upper_bound_seconds": bound(0.90),
            "p99_upper_bound_seconds": bound(0.99),
            "buckets": self.buckets.iter().map(|(le, c)| json!([if le.is_finite() { json!(le) } else { json!("+Inf") }, c])).collect::<Vec<_>>(),
        })
    }
}

/// `Ok(None)` when ctxd has no `/metrics` (404): the overhead falls back to the
/// client-side figure.
fn scrape(runtime: &Runtime, client: &reqwest::Client, base: &str) -> Option<String> {
    runtime.block_on(async {
        let response = client.get(format!("{base}/metrics")).send().await.ok()?;
        if response.status() != 200 {
            return None;
        }
        response.text().await.ok()
    })
}

fn metric_deltas(
    before: &Option<String>,
    after: &Option<String>,
) -> Option<BTreeMap<&'static str, Histogram>> {
    let (before, after) = (before.as_ref()?, after.as_ref()?);
    let mut found = BTreeMap::new();
    for name in [OVERHEAD_METRIC, TURN_METRIC, PROVIDER_CALL_METRIC] {
        if let Some(after) = parse_histogram(after, name) {
            let before = parse_histogram(before, name).unwrap_or_default();
            found.insert(name, after.minus(&before));
        }
    }
    (!found.is_empty()).then_some(found)
}

// ---------------------------------------------------------------------------------------
// One measured phase.

#[derive(Clone, Copy, PartialEq)]
enum Load {
    Closed(usize),
    Open(f64),
}

struct Phase {
    side: &'static str,
    providers: usize,
    load: Load,
    seconds: f64,
    /// Sorted latencies (µs) of the measured window.
    sorted_us: Vec<u32>,
    /// Measured slices folded into this phase (interleaved with the other side).
    rounds: usize,
    recorded: Recorded,
    cpu: CpuSeconds,
    /// Peak RSS (KiB) over the measured window of the process doing the work: ctxd for
    /// a ctxd side, the bench process (client and mocks) for the baseline.
    peak_rss_kib: u64,
    /// Which process `peak_rss_kib` is.
    peak_rss_process: &'static str,
    /// Peak RSS of the bench process (client and mocks), for both sides.
    bench_peak_rss_kib: u64,
    peak_source: &'static str,
    /// Deltas of ctxd's `/metrics` histograms over the measured window(s).
    metrics: Option<BTreeMap<&'static str, Histogram>>,
    /// Lookups the mocks received over the measured window(s): the upstream calls.
    upstream_lookups: u64,
}

#[derive(Clone, Copy, Default)]
struct CpuSeconds {
    ctxd: f64,
    /// Of `ctxd`, the trace writer thread's.
    writer: f64,
    client: f64,
    mock: f64,
    /// CPU-seconds the whole machine was busy.
    machine_busy: f64,
    /// CPU-seconds the machine had (cores × wall time).
    machine_total: f64,
    /// Busy CPU-seconds neither ctxd nor the bench process used: other processes on
    /// the shared machine (a compiler, another test run), plus kernel work not charged
    /// to a process. Large values mean the window was disturbed.
    foreign: f64,
}

impl CpuSeconds {
    fn add(&mut self, other: &CpuSeconds) {
        self.ctxd += other.ctxd;
        self.writer += other.writer;
        self.client += other.client;
        self.mock += other.mock;
        self.machine_busy += other.machine_busy;
        self.machine_total += other.machine_total;
        self.foreign += other.foreign;
    }

    fn foreign_fraction(&self) -> f64 {
        self.foreign / self.machine_total.max(f64::EPSILON)
    }
}

impl Phase {
    fn turns(&self) -> usize {
        self.sorted_us.len()
    }

    fn throughput(&self) -> f64 {
        self.turns() as f64 / self.seconds
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.sorted_us, p)
    }

    fn max_ms(&self) -> f64 {
        self.sorted_us
            .last()
            .map_or(f64::NAN, |&us| us as f64 / 1e3)
    }

    fn mean_ms(&self) -> f64 {
        self.sorted_us.iter().map(|&us| us as f64).sum::<f64>() / self.turns().max(1) as f64 / 1e3
    }

    fn cpu_total(&self) -> f64 {
        self.cpu.ctxd + self.cpu.client + self.cpu.mock
    }

    fn per_1000(&self, seconds: f64) -> f64 {
        seconds * 1000.0 / self.turns().max(1) as f64
    }

    /// CPU µs per turn of the server process (ctxd, or the same-hop server).
    fn cpu_us_per_turn(&self) -> f64 {
        self.per_1000(self.cpu.ctxd) * 1000.0
    }

    /// CPU µs per turn of ctxd's trace writer thread (0 for a side without one).
    fn writer_us_per_turn(&self) -> f64 {
        self.per_1000(self.cpu.writer) * 1000.0
    }

    /// Upstream lookups per provider call a turn made: 1 without a cache.
    fn upstream_per_call(&self) -> f64 {
        self.upstream_lookups as f64 / (self.turns() * self.providers).max(1) as f64
    }

    fn overhead_p99_seconds(&self) -> Option<f64> {
        let histogram = self.metrics.as_ref()?.get(OVERHEAD_METRIC)?;
        histogram.quantile_upper(0.99).filter(|v| v.is_finite())
    }

    /// Folds the next round's slice of the same side and load into this one.
    fn absorb(&mut self, other: Phase) {
        self.seconds += other.seconds;
        self.sorted_us.extend(other.sorted_us);
        self.sorted_us.sort_unstable();
        self.recorded.merge(other.recorded);
        self.cpu.add(&other.cpu);
        self.peak_rss_kib = self.peak_rss_kib.max(other.peak_rss_kib);
        self.bench_peak_rss_kib = self.bench_peak_rss_kib.max(other.bench_peak_rss_kib);
        self.rounds += other.rounds;
        self.upstream_lookups += other.upstream_lookups;
        self.metrics = match (self.metrics.take(), other.metrics) {
            (Some(mut mine), Some(theirs)) => {
                for (name, histogram) in theirs {
                    let merged = match mine.get(name) {
                        Some(existing) => existing.plus(&histogram),
                        None => histogram,
                    };
                    mine.insert(name, merged);
                }
                Some(mine)
            }
            (mine, theirs) => mine.or(theirs),
        };
    }

    fn json(&self) -> Value {
        let lag = {
            let mut lag = self.recorded.lag_us.clone();
            lag.sort_unstable();
            (!lag.is_empty()).then(|| {
                json!({"p50_ms": percentile_ms(&lag, 0.5), "p99_ms": percentile_ms(&lag, 0.99),
                       "max_ms": percentile_ms(&lag, 1.0)})
            })
        };
        json!({
            "side": self.side,
            "providers_per_turn": self.providers,
            "load": match self.load {
                Load::Closed(c) => json!({"kind": "closed", "concurrency": c}),
                Load::Open(rate) => json!({"kind": "open", "rate_per_second": rate}),
            },
            "measured_seconds": self.seconds,
            "rounds": self.rounds,
            "turns": self.turns(),
            "errors": self.recorded.errors,
            "warmup_errors": self.recorded.warmup_errors,
            "first_error": self.recorded.first_error,
            "dropped": self.recorded.dropped,
            "dispatch_lag": lag,
            "throughput_per_second": self.throughput(),
            "latency_ms": {
                "mean": self.mean_ms(),
                "p50": self.percentile_ms(0.50),
                "p90": self.percentile_ms(0.90),
                "p99": self.percentile_ms(0.99),
                "p999": self.percentile_ms(0.999),
                "max": self.max_ms(),
            },
            "percentile_curve_ms": curve(&self.sorted_us).iter().map(|(p, ms)| json!([p, ms])).collect::<Vec<_>>(),
            "cpu_seconds": {
                "ctxd": self.cpu.ctxd,
                "ctxd_trace_writer_thread": self.cpu.writer,
                "client": self.cpu.client,
                "mocks": self.cpu.mock,
                "total": self.cpu_total(),
                "machine_busy": self.cpu.machine_busy,
                "machine_available": self.cpu.machine_total,
                "machine_busy_fraction": self.cpu.machine_busy / self.cpu.machine_total.max(f64::EPSILON),
                "foreign": self.cpu.foreign,
                "foreign_fraction": self.cpu.foreign_fraction(),
            },
            "cpu_seconds_per_1000_turns": {
                "ctxd": self.per_1000(self.cpu.ctxd),
                "ctxd_trace_writer_thread": self.per_1000(self.cpu.writer),
                "client": self.per_1000(self.cpu.client),
                "mocks": self.per_1000(self.cpu.mock),
                "total": self.per_1000(self.cpu_total()),
            },
            "upstream_lookups": self.upstream_lookups,
            "upstream_lookups_per_provider_call": self.upstream_per_call(),
            "peak_rss_kib": self.peak_rss_kib,
            "peak_rss_process": self.peak_rss_process,
            "bench_process_peak_rss_kib": self.bench_peak_rss_kib,
            "peak_rss_source": self.peak_source,
            "metrics": self.metrics.as_ref().map(|m| m.iter().map(|(name, h)| ((*name).to_owned(), h.json())).collect::<serde_json::Map<String, Value>>()),
        })
    }
}

fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted_us.len() as f64).ceil() as usize;
    sorted_us[rank.clamp(1, sorted_us.len()) - 1] as f64 / 1e3
}

/// `(percentile, ms)` points spaced evenly on the "nines" axis, up to the maximum.
fn curve(sorted_us: &[u32]) -> Vec<(f64, f64)> {
    if sorted_us.is_empty() {
        return Vec::new();
    }
    let n = sorted_us.len() as f64;
    let top = n.log10();
    let mut points = Vec::new();
    let mut x = 0.0;
    while x < top {
        let p = 1.0 - 10f64.powf(-x);
        points.push((p * 100.0, percentile_ms(sorted_us, p)));
        x += 0.05;
    }
    points.push((100.0, percentile_ms(sorted_us, 1.0)));
    points
}

struct Machine {
    ticks: f64,
}

/// What [`Machine::interleave`] needs besides the targets.
struct PhaseSettings<'a> {
    providers: usize,
    load: Load,
    warmup: Duration,
    duration: Duration,
    rounds: usize,
    metrics_client: &'a reqwest::Client,
    /// Every mock's lookups, counted together.
    upstream: &'a AtomicU64,
}

/// The lookup of value `value` ctxd makes to mock `k` (provider `p{k+1}`, its bearer
/// secret), as both baselines make it.
fn mock_lookup(
    client: &reqwest::Client,
    url: &str,
    k: usize,
    value: &str,
) -> reqwest::RequestBuilder {
    let request = LookupRequest::new(&format!("p{}", k + 1), "customerId", value, LIMIT);
    client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .bearer_auth(PROVIDER_SECRET)
        .body(serde_json::to_vec(&request).expect("a lookup request serializes"))
}

/// The order of the sides in slice round `round`: forward in even rounds, backward in
/// odd ones (A B C, then C B A), so over each pair of rounds every side's slices sit at
/// the same mean time and a steady drift of the machine falls on all sides alike. In
/// the second pair of rounds the first and last sides trade places (C B A, then A B C):
/// over four rounds they hold the same positions — the run's first or last slice, a
/// slice right after their own. (A binary compared with itself still showed the `ctxd`
/// side 6–8 % more CPU per turn than the `compare` side: docs/PERFORMANCE.md measures a
/// change in both roles.)
fn slice_order(sides: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sides).collect();
    if (round / 2) % 2 == 1 {
        order.swap(0, sides - 1);
    }
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

impl Machine {
    /// Every side under the same load, interleaved A B … B A in `rounds` slices of
    /// `duration / rounds` (each after its own warm-up), so drift on the shared machine
    /// falls on every side alike; the slices of each side are folded together. One phase
    /// per target, in the targets' order.
    fn interleave(
        &self,
        runtime: &Runtime,
        targets: &[&Arc<Target>],
        settings: &PhaseSettings<'_>,
    ) -> Vec<Phase> {
        let slice = settings.duration / settings.rounds as u32;
        let mut folded: Vec<Option<Phase>> = targets.iter().map(|_| None).collect();
        for round in 0..settings.rounds {
            for index in slice_order(targets.len(), round) {
                let phase = self.phase(runtime, Arc::clone(targets[index]), settings, slice);
                match &mut folded[index] {
                    Some(existing) => existing.absorb(phase),
                    empty => *empty = Some(phase),
                }
            }
        }
        folded.into_iter().map(Option::unwrap).collect()
    }

    fn phase(
        &self,
        runtime: &Runtime,
        target: Arc<Target>,
        settings: &PhaseSettings<'_>,
        duration: Duration,
    ) -> Phase {
        let (providers, load, metrics_client) =
            (settings.providers, settings.load, settings.metrics_client);
        let start = Instant::now() + Duration::from_millis(20);
        let t0 = start + settings.warmup;
        let t1 = t0 + duration;
        let side = target.name();
        let (ctxd_pid, ctxd_base) = target.process().map_or((None, None), |(pid, base)| {
            (Some(pid), Some(base.to_owned()))
        });
        let driver = match load {
            Load::Closed(concurrency) => runtime.spawn(async move {
                tokio::time::sleep_until(start).await;
                closed_loop(target, concurrency, t0, t1).await
            }),
            Load::Open(rate) => runtime.spawn(open_loop(target, rate, start, t0, t1)),
        };
        let pid = ctxd_pid.map(|pid| pid.to_string());
        let sleep_until = |when: Instant| {
            std::thread::sleep(when.saturating_duration_since(Instant::now()));
        };
        sleep_until(t0);
        let scrape_metrics = || {
            let base = ctxd_base.as_deref()?;
            scrape(runtime, metrics_client, base)
        };
        let metrics_before = scrape_metrics();
        let reset = pid.as_deref().is_none_or(reset_peak) & reset_peak("self");
        let before = cpu_snapshot(ctxd_pid);
        let upstream_before = settings.upstream.load(Ordering::Relaxed);
        let (mut sampled_peak, mut sampled_bench_peak) = (0, 0);
        while Instant::now() < t1 {
            if let Some(pid) = &pid {
                sampled_peak = sampled_peak.max(memory_kib(pid).0);
            }
            sampled_bench_peak = sampled_bench_peak.max(memory_kib("self").0);
            std::thread::sleep(
                Duration::from_millis(250).min(t1.saturating_duration_since(Instant::now())),
            );
        }
        let after = cpu_snapshot(ctxd_pid);
        let upstream_lookups = settings.upstream.load(Ordering::Relaxed) - upstream_before;
        let (_, ctxd_hwm) = pid.as_deref().map_or((0, 0), memory_kib);
        let (_, bench_hwm) = memory_kib("self");
        let metrics_after = scrape_metrics();
        let mut recorded = runtime.block_on(driver).expect("the driver does not panic");
        let mut sorted_us = std::mem::take(&mut recorded.latencies_us);
        sorted_us.sort_unstable();
        let ticks = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / self.ticks;
        let ctxd_seconds = ticks(before.ctxd, after.ctxd);
        let bench_seconds = ticks(before.bench, after.bench);
        let busy = ticks(before.busy, after.busy);
        let cpu = CpuSeconds {
            ctxd: ctxd_seconds,
            writer: ticks(before.writer, after.writer),
            client: ticks(before.client, after.client),
            mock: ticks(before.mock, after.mock),
            machine_busy: busy,
            machine_total: ticks(before.total, after.total),
            foreign: (busy - ctxd_seconds - bench_seconds).max(0.0),
        };
        let (ctxd_peak, bench_peak) = if reset {
            (ctxd_hwm, bench_hwm)
        } else {
            (sampled_peak, sampled_bench_peak)
        };
        Phase {
            side,
            providers,
            load,
            seconds: duration.as_secs_f64(),
            sorted_us,
            rounds: 1,
            recorded,
            cpu,
            peak_rss_kib: if pid.is_some() { ctxd_peak } else { bench_peak },
            peak_rss_process: if pid.is_some() {
                side
            } else {
                "bench (client + mocks)"
            },
            bench_peak_rss_kib: bench_peak,
            peak_source: if reset {
                "VmHWM after clear_refs at the window start"
            } else {
                "VmRSS sampled every 250 ms"
            },
            metrics: metric_deltas(&metrics_before, &metrics_after),
            upstream_lookups,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Soak.

struct Soak {
    providers: usize,
    concurrency: usize,
    /// `(seconds since start, ctxd VmRSS KiB, turns answered in that second)`.
    samples: Vec<(f64, u64, u64)>,
    errors: u64,
    first_error: Option<String>,
    /// Size of each file of the trace store at the end of the soak.
    trace_store_files: BTreeMap<String, u64>,
}

impl Soak {
    fn after_warmup(&self) -> impl Iterator<Item = &(f64, u64, u64)> {
        self.samples
            .iter()
            .filter(|(t, _, _)| *t >= SOAK_WARMUP.as_secs_f64())
    }

    /// Mean RSS over the first [`SOAK_WINDOW`] samples after the warm-up (one sample
    /// is too noisy: RSS moves by ~1 MiB from second to second with allocator churn).
    fn at_warmup_kib(&self) -> u64 {
        mean(self.after_warmup().take(SOAK_WINDOW).map(|s| s.1))
    }

    /// Mean RSS over the last [`SOAK_WINDOW`] samples.
    fn end_kib(&self) -> u64 {
        mean(self.samples.iter().rev().take(SOAK_WINDOW).map(|s| s.1))
    }

    fn max_after_warmup_kib(&self) -> u64 {
        self.after_warmup().map(|s| s.1).max().unwrap_or(0)
    }

    /// End vs warm-up (means).
    fn growth(&self) -> f64 {
        let base = self.at_warmup_kib() as f64;
        (self.end_kib() as f64 - base) / base.max(1.0)
    }

    /// Highest single sample after the warm-up vs the warm-up mean.
    fn peak_growth(&self) -> f64 {
        let base = self.at_warmup_kib() as f64;
        (self.max_after_warmup_kib() as f64 - base) / base.max(1.0)
    }

    /// Least-squares slope of RSS after the warm-up, KiB per minute.
    fn slope_kib_per_minute(&self) -> f64 {
        let points: Vec<(f64, f64)> = self.after_warmup().map(|s| (s.0, s.1 as f64)).collect();
        let n = points.len() as f64;
        if n < 2.0 {
            return 0.0;
        }
        let (mx, my) = (
            points.iter().map(|p| p.0).sum::<f64>() / n,
            points.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        sxy / sxx.max(f64::EPSILON) * 60.0
    }

    fn flat(&self) -> bool {
        self.growth() < FLAT_GROWTH && self.peak_growth() < FLAT_GROWTH
    }

    fn json(&self) -> Value {
        let seconds = self.samples.last().map_or(0.0, |s| s.0);
        let turns: u64 = self.samples.iter().map(|s| s.2).sum();
        json!({
            "providers_per_turn": self.providers,
            "concurrency": self.concurrency,
            "seconds": seconds,
            "turns": turns,
            "throughput_per_second": turns as f64 / seconds.max(1e-9),
            "errors": self.errors,
            "first_error": self.first_error,
            "warmup_seconds": SOAK_WARMUP.as_secs_f64(),
            "rss_at_warmup_kib": self.at_warmup_kib(),
            "rss_end_kib": self.end_kib(),
            "rss_max_after_warmup_kib": self.max_after_warmup_kib(),
            "growth_fraction": self.growth(),
            "peak_growth_fraction": self.peak_growth(),
            "slope_kib_per_minute": self.slope_kib_per_minute(),
            "flat": self.flat(),
            "flat_means": format!(
                "mean RSS of the last {SOAK_WINDOW} s, and every sample after {} s, within {:.0} % of the mean RSS of the {SOAK_WINDOW} s after the {} s warm-up",
                SOAK_WARMUP.as_secs(), FLAT_GROWTH * 100.0, SOAK_WARMUP.as_secs()
            ),
            "trace_store_files_bytes": self.trace_store_files,
            "samples": self.samples.iter().map(|(t, kib, turns)| json!([t, kib, turns])).collect::<Vec<_>>(),
        })
    }
}

fn mean(values: impl Iterator<Item = u64>) -> u64 {
    let (sum, n) = values.fold((0, 0), |(sum, n), v| (sum + v, n + 1));
    sum / n.max(1)
}

fn soak(
    runtime: &Runtime,
    mocks: &[SocketAddr],
    providers: usize,
    concurrency: usize,
    seconds: Duration,
    workers: Option<usize>,
) -> Soak {
    let client = client(concurrency * 2);
    let ctxd = ServedCtxd::start(
        &CtxdBinary::bench(),
        &mocks[..providers],
        workers,
        runtime,
        &client,
        client.clone(),
        Workload::PLAIN,
    );
    let answered = Arc::clone(&ctxd.answered);
    let start = Instant::now();
    let end = start + seconds;
    let driver = runtime.spawn(closed_loop(
        Arc::clone(&ctxd.target),
        concurrency,
        start,
        end,
    ));
    let pid = ctxd.process.pid().to_string();
    let mut samples = Vec::new();
    let mut last = 0;
    let mut next = start + Duration::from_secs(1);
    while next <= end {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let now = answered.load(Ordering::Relaxed);
        samples.push(((next - start).as_secs_f64(), memory_kib(&pid).0, now - last));
        last = now;
        next += Duration::from_secs(1);
    }
    let recorded = runtime.block_on(driver).unwrap();
    let store = ctxd.process.dir.path().join("data");
    let trace_store_files: BTreeMap<String, u64> = std::fs::read_dir(&store)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let bytes = e.metadata().ok()?.len();
                    Some((e.file_name().to_string_lossy().into_owned(), bytes))
                })
                .collect()
        })
        .unwrap_or_default();
    let traces = ctxd.stop();
    if traces.stored != Some(traces.answered) {
        eprintln!(
            "soak: {} turns answered, {:?} traces stored",
            traces.answered, traces.stored
        );
    }
    Soak {
        providers,
        concurrency,
        samples,
        errors: recorded.errors + recorded.warmup_errors,
        first_error: recorded.first_error,
        trace_store_files,
    }
}

// ---------------------------------------------------------------------------------------
// The chart.

const COLOR_CTXD: &str = "#1f5fbf";
const COLOR_BASE: &str = "#d9731a";
const COLOR_COMPARE: &str = "#2e8b3e";
const COLOR_SAME_HOP: &str = "#8a3fb0";

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Nice ticks for a log axis between `lo` and `hi` (ms).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                ticks.push(v);
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// The largest 1-2-5 value at or below `v`.
fn nice_below(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|n| *n <= v * 1.0001)
        .unwrap_or(decade)
}

/// The smallest 1-2-5 value at or above `v`.
fn nice_above(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|n| *n >= v * 0.9999)
        .unwrap_or(10.0 * decade)
}

fn ms_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.3}");
        text.trim_end_matches('0').to_owned()
    }
}

struct Panel<'a> {
    title: String,
    subtitle: String,
    ctxd: &'a Phase,
    baseline: &'a Phase,
    same_hop: Option<&'a Phase>,
    compare: Option<&'a Phase>,
}

/// One percentile curve of a panel.
struct Curve<'a> {
    phase: &'a Phase,
    color: &'static str,
    dash: &'static str,
    name: &'static str,
}

impl<'a> Panel<'a> {
    /// In legend order; drawn in reverse, so that ctxd's curve lies on top.
    fn curves(&self) -> Vec<Curve<'a>> {
        let mut curves = vec![
            Curve {
                phase: self.ctxd,
                color: COLOR_CTXD,
                dash: "none",
                name: "ctxd",
            },
            Curve {
                phase: self.baseline,
                color: COLOR_BASE,
                dash: "7 4",
                name: "raw baseline",
            },
        ];
        curves.extend(self.same_hop.map(|phase| Curve {
            phase,
            color: COLOR_SAME_HOP,
            dash: "4 2 1 2",
            name: "same-hop baseline",
        }));
        curves.extend(self.compare.map(|phase| Curve {
            phase,
            color: COLOR_COMPARE,
            dash: "2 3",
            name: "compare",
        }));
        curves
    }
}

fn chart(panels: &[Panel<'_>], title: &str, note: &str) -> String {
    const W: f64 = 470.0;
    const H: f64 = 410.0;
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = 18.0;
    const TOP: f64 = 58.0;
    const BOTTOM: f64 = 108.0;
    let columns = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(columns);
    let width = W * columns as f64 + 20.0;
    let height = H * rows as f64 + 90.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="28" font-size="19" font-weight="bold" text-anchor="middle">{}</text>"#,
        width / 2.0,
        xml(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="50" font-size="12.5" fill="#444" text-anchor="middle">{}</text>"##,
        width / 2.0,
        xml(note)
    );
    // One shared y range for every panel, so they compare at a glance.
    let all: Vec<&Phase> = panels
        .iter()
        .flat_map(Panel::curves)
        .map(|curve| curve.phase)
        .collect();
    // From the lowest 1st percentile (the minimum is noise) to the highest maximum,
    // widened to the nearest 1-2-5 values; samples below the range sit on its floor.
    let lo = all
        .iter()
        .map(|p| p.percentile_ms(0.01).max(0.01))
        .fold(f64::INFINITY, f64::min);
    let hi = all.iter().map(|p| p.max_ms()).fold(0.0, f64::max);
    let (lo, hi) = (nice_below(lo), nice_above(hi));
    let x_max = all.iter().map(|p| p.turns()).max().unwrap_or(10).max(10) as f64;
    let x_max = x_max.log10();
    for (index, panel) in panels.iter().enumerate() {
        let ox = 10.0 + W * (index % columns) as f64;
        let oy = 70.0 + H * (index / columns) as f64;
        let (px, py) = (ox + LEFT, oy + TOP);
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let x_of = |nines: f64| px + nines / x_max * pw;
        let y_of =
            |ms: f64| py + ph - (ms.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * ph;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="14.5" font-weight="bold" text-anchor="middle">{}</text>"#,
            px + pw / 2.0,
            oy + 18.0,
            xml(&panel.title)
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" font-size="11.5" fill="#444" text-anchor="middle">{}</text>"##,
            px + pw / 2.0,
            oy + 35.0,
            xml(&panel.subtitle)
        );
        // Grid and y axis.
        for tick in log_ticks(lo, hi) {
            let y = y_of(tick);
            let major = (tick.log10() - tick.log10().round()).abs() < 1e-9;
            let _ = writeln!(
                svg,
                r##"<line x1="{px}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="{}" stroke-width="1"/>"##,
                px + pw,
                if major { "#c8c8c8" } else { "#ececec" }
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
                px - 6.0,
                y + 4.0,
                ms_label(tick)
            );
        }
        // X axis: percentiles on a "nines" scale.
        for (nines, label) in [
            (f64::log10(2.0), "50%"),
            (1.0, "90%"),
            (2.0, "99%"),
            (3.0, "99.9%"),
            (4.0, "99.99%"),
            (5.0, "99.999%"),
        ] {
            if nines > x_max + 1e-9 {
                continue;
            }
            let x = x_of(nines);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{py}" y2="{}" stroke="#e2e2e2"/>"##,
                py + ph
            );
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{label}</text>"#,
                py + ph + 16.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">percentile (log scale of 1/(1−p); right edge = max)</text>"#,
            px + pw / 2.0,
            py + ph + 34.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">latency, ms (log scale)</text>"#,
            ox + 16.0,
            py + ph / 2.0,
            ox + 16.0,
            py + ph / 2.0
        );
        // Curves.
        for Curve {
            phase, color, dash, ..
        } in panel.curves().into_iter().rev()
        {
            let n = phase.turns() as f64;
            let points: Vec<String> = curve(&phase.sorted_us)
                .iter()
                .map(|&(p, ms)| {
                    let nines = if p >= 100.0 {
                        n.log10()
                    } else {
                        -(1.0 - p / 100.0).log10()
                    };
                    format!("{:.1},{:.1}", x_of(nines), y_of(ms))
                })
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2.2" stroke-dasharray="{dash}"/>"#,
                points.join(" ")
            );
        }
        // Legend under the axis title, clear of the curves.
        let lx = px;
        let ly = py + ph + 50.0;
        for (
            row,
            Curve {
                phase,
                color,
                dash,
                name,
            },
        ) in panel.curves().into_iter().enumerate()
        {
            let y = ly + 6.0 + row as f64 * 19.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" x2="{}" y1="{y}" y2="{y}" stroke="{color}" stroke-width="2.2" stroke-dasharray="{dash}"/>"#,
                lx + 26.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" font-size="11.5">{name}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms</text>"#,
                lx + 32.0,
                y + 4.0,
                phase.throughput(),
                phase.percentile_ms(0.5),
                phase.percentile_ms(0.99)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

fn soak_chart(soak: &Soak) -> String {
    const W: f64 = 760.0;
    const H: f64 = 380.0;
    let (px, py, pw, ph) = (80.0, 60.0, W - 110.0, H - 130.0);
    let t_max = soak.samples.last().map_or(1.0, |s| s.0);
    let rss_max = soak.samples.iter().map(|s| s.1).max().unwrap_or(1) as f64 / 1024.0;
    let y_top = (rss_max * 1.25 / 10.0).ceil() * 10.0;
    let x_of = |t: f64| px + t / t_max * pw;
    let y_of = |mib: f64| py + ph - mib / y_top * ph;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="26" font-size="17" font-weight="bold" text-anchor="middle">ctxd RSS during a {:.0} s soak ({} providers/turn, {} concurrent)</text>"#,
        W / 2.0,
        t_max,
        soak.providers,
        soak.concurrency
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="46" font-size="12.5" fill="#444" text-anchor="middle">RSS after warm-up {:.1} MiB, end {:.1} MiB ({SOAK_WINDOW} s means): growth {:.1} %, peak {:.1} MiB (+{:.1} %): {}, slope {:.0} KiB/min</text>"##,
        W / 2.0,
        soak.at_warmup_kib() as f64 / 1024.0,
        soak.end_kib() as f64 / 1024.0,
        soak.growth() * 100.0,
        soak.max_after_warmup_kib() as f64 / 1024.0,
        soak.peak_growth() * 100.0,
        if soak.flat() { "flat" } else { "NOT flat" },
        soak.slope_kib_per_minute()
    );
    let step = if y_top > 200.0 {
        50.0
    } else if y_top > 80.0 {
        20.0
    } else {
        10.0
    };
    let mut v = 0.0;
    while v <= y_top + 1e-9 {
        let y = y_of(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{px}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{v:.0}</text>"##,
            px + pw,
            px - 6.0,
            y + 4.0
        );
        v += step;
    }
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let x = x_of(t);
        let _ = writeln!(
            svg,
            r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{t:.0}</text>"#,
            py + ph + 16.0
        );
        t += if t_max > 120.0 { 30.0 } else { 10.0 };
    }
    let wx = x_of(SOAK_WARMUP.as_secs_f64());
    let _ = writeln!(
        svg,
        r##"<rect x="{px}" y="{py}" width="{:.1}" height="{ph}" fill="#f3f3f3"/><text x="{:.1}" y="{}" font-size="11" fill="#666" text-anchor="middle">warm-up</text>"##,
        wx - px,
        (px + wx) / 2.0,
        py + 14.0
    );
    let points: Vec<String> = soak
        .samples
        .iter()
        .map(|s| format!("{:.1},{:.1}", x_of(s.0), y_of(s.1 as f64 / 1024.0)))
        .collect();
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{COLOR_CTXD}" stroke-width="2.2"/>"#,
        points.join(" ")
    );
    let _ = writeln!(
        svg,
        r#"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">seconds since start</text>"#,
        px + pw / 2.0,
        py + ph + 36.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="24" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 24 {})">ctxd VmRSS, MiB</text>"#,
        py + ph / 2.0,
        py + ph / 2.0
    );
    svg.push_str("</svg>\n");
    svg
}

// ---------------------------------------------------------------------------------------
// Main.

struct Run {
    providers: usize,
    ctxd: Phase,
    baseline: Phase,
    /// The same-hop baseline: a minimal turn server doing ctxd's network work (not in
    /// the PostgreSQL run).
    same_hop: Option<Phase>,
    traces: TraceCheck,
    /// The `--compare-ctxd` binary's side, when one was given.
    compare: Option<Compared>,
}

/// The `--compare-ctxd` binary at one provider count, interleaved with ctxd.
struct Compared {
    phase: Phase,
    traces: TraceCheck,
}

impl Compared {
    fn json(&self, ctxd: &Phase, binary: &Path) -> Value {
        let versus = Versus::of(ctxd, &self.phase);
        json!({
            "binary": binary,
            "figures": self.phase.json(),
            "ctxd_cpu_per_turn_ratio": versus.ctxd_cpu_per_turn,
            "total_cpu_per_turn_ratio": versus.total_cpu_per_turn,
            "throughput_ratio": versus.throughput,
            "writer_cpu_per_turn_ratio": versus.writer_ratio(),
            "turns_answered_incl_warmup": self.traces.answered,
            "turns_in_trace_store": self.traces.stored,
            "trace_store_bytes_per_turn": self.traces.bytes_per_turn(),
        })
    }
}

/// ctxd against the `--compare-ctxd` binary, measured side by side: the before/after
/// figures of a change, which hold where absolute figures drift between runs.
struct Versus {
    /// ctxd's own CPU per turn ÷ the compare binary's: below 1, ctxd costs less.
    ctxd_cpu_per_turn: f64,
    /// The same with the client and the mocks: the whole machine's cost of a turn.
    total_cpu_per_turn: f64,
    /// ctxd's turns/s ÷ the compare binary's.
    throughput: f64,
    /// The trace writer thread's CPU µs per turn, ctxd's and the compare binary's.
    writer_us: (f64, f64),
}

impl Versus {
    fn of(ctxd: &Phase, compare: &Phase) -> Versus {
        Versus {
            ctxd_cpu_per_turn: ctxd.per_1000(ctxd.cpu.ctxd) / compare.per_1000(compare.cpu.ctxd),
            total_cpu_per_turn: ctxd.per_1000(ctxd.cpu_total())
                / compare.per_1000(compare.cpu_total()),
            throughput: ctxd.throughput() / compare.throughput(),
            writer_us: (ctxd.writer_us_per_turn(), compare.writer_us_per_turn()),
        }
    }

    /// ctxd's trace writer thread CPU per turn ÷ the compare binary's.
    fn writer_ratio(&self) -> f64 {
        self.writer_us.0 / self.writer_us.1
    }

    fn line(&self) -> String {
        let (writer, compared) = self.writer_us;
        format!(
            "  ctxd ÷ compare: CPU per turn {:.3} (ctxd process), {:.3} (ctxd + client + mocks); throughput {:.3}; trace writer thread {writer:.1} µs ÷ {compared:.1} µs per turn = {:.3}",
            self.ctxd_cpu_per_turn,
            self.total_cpu_per_turn,
            self.throughput,
            self.writer_ratio()
        )
    }
}

/// ctxd against the same-hop baseline (a minimal server doing ctxd's network work, see
/// `load/same_hop.rs`), measured side by side: what ctxd itself adds per turn.
struct SameHop {
    /// ctxd's turns/s ÷ the same-hop server's.
    throughput: f64,
    /// CPU µs per turn of the ctxd process and of the same-hop process.
    ctxd_cpu_us: f64,
    same_hop_cpu_us: f64,
    /// The same with the client and the mocks: the whole machine's cost of a turn.
    total_cpu_per_turn: f64,
    /// Of ctxd's CPU µs per turn, its trace writer thread's.
    writer_us: f64,
}

impl SameHop {
    fn of(ctxd: &Phase, hop: &Phase) -> SameHop {
        SameHop {
            throughput: ctxd.throughput() / hop.throughput(),
            ctxd_cpu_us: ctxd.cpu_us_per_turn(),
            same_hop_cpu_us: hop.cpu_us_per_turn(),
            total_cpu_per_turn: ctxd.per_1000(ctxd.cpu_total()) / hop.per_1000(hop.cpu_total()),
            writer_us: ctxd.writer_us_per_turn(),
        }
    }

    fn line(&self) -> String {
        format!(
            "  ctxd ÷ same-hop: throughput {:.3}; server CPU per turn {:.0} µs ÷ {:.0} µs = {:.2} (ctxd + client + mocks {:.2}); ctxd's own work {:.0} µs per turn, its trace writer thread {:.0} µs",
            self.throughput,
            self.ctxd_cpu_us,
            self.same_hop_cpu_us,
            self.ctxd_cpu_us / self.same_hop_cpu_us,
            self.total_cpu_per_turn,
            self.ctxd_cpu_us - self.same_hop_cpu_us,
            self.writer_us
        )
    }

    fn json(&self) -> Value {
        json!({
            "throughput_ratio": self.throughput,
            "ctxd_cpu_us_per_turn": self.ctxd_cpu_us,
            "same_hop_cpu_us_per_turn": self.same_hop_cpu_us,
            "server_cpu_per_turn_ratio": self.ctxd_cpu_us / self.same_hop_cpu_us,
            "total_cpu_per_turn_ratio": self.total_cpu_per_turn,
            "ctxd_own_cpu_us_per_turn": self.ctxd_cpu_us - self.same_hop_cpu_us,
            "ctxd_trace_writer_thread_cpu_us_per_turn": self.writer_us,
        })
    }
}

/// The `--repeated` run: a caching ctxd and a plain one on the same value mix.
struct Repeated {
    fraction: f64,
    cached: Phase,
    plain: Phase,
}

impl Repeated {
    fn json(&self) -> Value {
        json!({
            "repeated_fraction": self.fraction,
            "hot_values": HOT_VALUES,
            "binding": "every provider cache = { ttl = \"60s\" } (cached side), none (plain side)",
            "cached": self.cached.json(),
            "plain": self.plain.json(),
            "upstream_lookups_per_provider_call": {
                "cached": self.cached.upstream_per_call(),
                "plain": self.plain.upstream_per_call(),
            },
            "throughput_ratio": self.cached.throughput() / self.plain.throughput(),
            "ctxd_cpu_per_turn_ratio": self.cached.per_1000(self.cached.cpu.ctxd)
                / self.plain.per_1000(self.plain.cpu.ctxd),
        })
    }
}

struct Overhead {
    providers: usize,
    rate: f64,
    ctxd: Phase,
    baseline: Phase,
}

fn fmt_row(phase: &Phase, ratio: Option<f64>) -> String {
    let rss = phase.peak_rss_kib as f64 / 1024.0;
    format!(
        "{:>3} {:<9} {:>8.0} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>8.1} {:>6}",
        phase.providers,
        phase.side,
        phase.throughput(),
        phase.percentile_ms(0.5),
        phase.percentile_ms(0.9),
        phase.percentile_ms(0.99),
        phase.max_ms(),
        phase.per_1000(phase.cpu.ctxd),
        phase.per_1000(phase.cpu.client),
        phase.per_1000(phase.cpu.mock),
        phase.per_1000(phase.cpu_total()),
        rss,
        ratio.map_or(String::new(), |r| format!("{r:.3}")),
    )
}

/// Other processes on the shared machine took more than this fraction of it.
const FOREIGN_WARNING: f64 = 0.05;

fn warn_foreign(phase: &Phase) {
    if phase.cpu.foreign_fraction() > FOREIGN_WARNING {
        println!(
            "    note: {:.0} % of the machine went to other processes during the {} windows: figures disturbed",
            phase.cpu.foreign_fraction() * 100.0,
            phase.side
        );
    }
}

const HEADER: &str = "  N side       turns/s  p50 ms  p90 ms  p99 ms   max ms  ctxd    client  mocks   total   RSS MiB  ratio\n                                                          CPU-s per 1000 turns";

/// The closed-loop runs as the scaling curve's points, in provider order.
fn scaling_points(runs: &[Run]) -> Vec<scaling::Point> {
    let mut points: Vec<scaling::Point> = runs
        .iter()
        .filter_map(|r| {
            let hop = r.same_hop.as_ref()?;
            Some(scaling::Point {
                providers: r.providers,
                ctxd_turns_per_second: r.ctxd.throughput(),
                same_hop_turns_per_second: hop.throughput(),
                raw_turns_per_second: r.baseline.throughput(),
                ctxd_cpu_us: r.ctxd.cpu_us_per_turn(),
                same_hop_cpu_us: hop.cpu_us_per_turn(),
            })
        })
        .collect();
    points.sort_by_key(|p| p.providers);
    points
}

/// Adds ctxd's throughput, p50, p99 and CPU-per-turn ratios against `baseline` to a
/// run's JSON object.
fn with_ratios(run: &mut Value, ctxd: &Phase, baseline: &Phase) {
    run["throughput_ratio"] = json!(ctxd.throughput() / baseline.throughput());
    run["p50_ratio"] = json!(ctxd.percentile_ms(0.5) / baseline.percentile_ms(0.5));
    run["p99_ratio"] = json!(ctxd.percentile_ms(0.99) / baseline.percentile_ms(0.99));
    run["cpu_per_turn_ratio"] =
        json!(ctxd.per_1000(ctxd.cpu_total()) / baseline.per_1000(baseline.cpu_total()));
}

fn main() {
    // The same-hop baseline's server is this binary started again.
    same_hop::serve_if_asked();
    let mut args = parse_args();
    std::fs::create_dir_all(&args.out).unwrap();
    let machine = Machine {
        ticks: clock_ticks(),
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let max_providers = args
        .providers
        .iter()
        .copied()
        .chain(args.soak.map(|_| args.soak_providers))
        .chain(args.repeated.map(|_| args.repeated_providers))
        .chain(args.postgres.then_some(postgres::PROVIDERS))
        .max()
        .unwrap_or(1);

    let mock_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.mock_threads)
        .thread_name("bench-mock")
        .enable_all()
        .build()
        .unwrap();
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap();
    let lookups: Lookups = Arc::default();
    let mocks: Vec<Mock> = mock_runtime.block_on(async {
        let mut mocks = Vec::new();
        for index in 1..=max_providers {
            mocks.push(start_mock(index, Arc::clone(&lookups)).await);
        }
        mocks
    });
    let addresses: Vec<SocketAddr> = mocks.iter().map(|m| m.address).collect();
    let pool = args.concurrency * 2;
    let side_client = client(pool);
    println!(
        "load bench: ctxd {} | {cpus} CPUs shared by ctxd ({} workers), the client ({} threads) and the mocks ({} threads) | concurrency {} | warm-up {:.0} s + {:.0} s per phase | same-hop upstream client: {}",
        env!("CARGO_BIN_EXE_ctxd"),
        args.workers.map_or("default".to_owned(), |w| w.to_string()),
        args.client_threads,
        args.mock_threads,
        args.concurrency,
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64(),
        args.same_hop_client.name()
    );
    let compare_binary = args.compare_ctxd.clone().map(CtxdBinary::compare);
    if compare_binary.is_some() && !args.rounds.is_multiple_of(4) {
        // ctxd and the compare binary are the first and last sides: only whole sets of
        // four rounds give them the same positions (see `slice_order`).
        args.rounds = args.rounds.div_ceil(4) * 4;
        eprintln!(
            "--compare-ctxd: {} rounds, so that ctxd and compare take turns at either end",
            args.rounds
        );
    }
    if let Some(binary) = &compare_binary {
        println!(
            "compare: {} (same deployment, interleaved with ctxd and the baseline in every closed-loop phase)",
            binary.path.display()
        );
    }

    let serve = |binary: &CtxdBinary, mocks: &[SocketAddr], workload: Workload| {
        ServedCtxd::start(
            binary,
            mocks,
            args.workers,
            &client_runtime,
            &side_client,
            client(pool),
            workload,
        )
    };
    // The settings of a closed-loop phase at `providers` per turn.
    let closed_loop_phase = |providers: usize| PhaseSettings {
        providers,
        load: Load::Closed(args.concurrency),
        warmup: args.warmup,
        duration: args.duration,
        rounds: args.rounds,
        metrics_client: &side_client,
        upstream: &lookups,
    };
    let mut runs: Vec<Run> = Vec::new();
    let mut overhead: Option<Overhead> = None;
    if !args.skip_load {
        for &providers in &args.providers {
            assert!(providers <= addresses.len());
            let mocks = &addresses[..providers];
            let ctxd = serve(&CtxdBinary::bench(), mocks, Workload::PLAIN);
            let compare = compare_binary
                .as_ref()
                .map(|binary| serve(binary, mocks, Workload::PLAIN));
            let raw_target = Arc::new(Target {
                client: client(pool),
                values: Values::Cycle,
                asked: AtomicU64::new(0),
                side: Side::Raw {
                    urls: mocks
                        .iter()
                        .map(|a| format!("http://{a}/context"))
                        .collect(),
                },
            });
            let hop = same_hop::SameHopProcess::start(mocks, args.workers, args.same_hop_client);
            let hop_target = Arc::new(Target {
                client: client(pool),
                values: Values::Cycle,
                asked: AtomicU64::new(0),
                side: Side::Ctxd {
                    label: "same-hop",
                    pid: hop.pid(),
                    base: hop.base().to_owned(),
                    url: format!("{}/v1/turns", hop.base()),
                    providers,
                    answered: Arc::default(),
                },
            });
            let mut settings = closed_loop_phase(providers);
            let mut targets = vec![&ctxd.target, &raw_target, &hop_target];
            targets.extend(compare.as_ref().map(|c| &c.target));
            let mut phases = machine
                .interleave(&client_runtime, &targets, &settings)
                .into_iter();
            let (ctxd_phase, baseline_phase, hop_phase) = (
                phases.next().unwrap(),
                phases.next().unwrap(),
                phases.next().unwrap(),
            );
            drop(hop);
            let compare_phase = phases.next();
            println!("\n{HEADER}");
            println!("{}", fmt_row(&ctxd_phase, None));
            for other in [&baseline_phase, &hop_phase]
                .into_iter()
                .chain(&compare_phase)
            {
                let ratio = ctxd_phase.throughput() / other.throughput();
                println!("{}", fmt_row(other, Some(ratio)));
            }
            println!("{}", SameHop::of(&ctxd_phase, &hop_phase).line());
            if let Some(compare_phase) = &compare_phase {
                println!("{}", Versus::of(&ctxd_phase, compare_phase).line());
            }
            for phase in [&ctxd_phase, &baseline_phase, &hop_phase]
                .into_iter()
                .chain(&compare_phase)
            {
                warn_foreign(phase);
                if let Some(error) = &phase.recorded.first_error {
                    println!(
                        "    {} errors: {} measured, {} in warm-up; first: {error}",
                        phase.side, phase.recorded.errors, phase.recorded.warmup_errors
                    );
                }
            }
            // The compare binary stops here: the half-saturation phase runs as without it.
            let compare = compare.zip(compare_phase).map(|(served, phase)| {
                let traces = served.stop();
                println!("  compare traces: {}", traces.describe());
                Compared { phase, traces }
            });
            if args.overhead_providers == Some(providers) {
                let rate = (ctxd_phase.throughput() * args.open_load).max(1.0);
                settings.load = Load::Open(rate);
                let mut phases = machine
                    .interleave(&client_runtime, &[&ctxd.target, &raw_target], &settings)
                    .into_iter();
                let (ctxd_open, baseline_open) = (phases.next().unwrap(), phases.next().unwrap());
                println!(
                    "  {}, open loop at {rate:.0} turns/s:",
                    open_load_label(args.open_load)
                );
                println!("{}", fmt_row(&ctxd_open, None));
                println!("{}", fmt_row(&baseline_open, None));
                warn_foreign(&ctxd_open);
                warn_foreign(&baseline_open);
                match ctxd_open.overhead_p99_seconds() {
                    Some(p99) => println!(
                        "  coordinator overhead p99 (from /metrics, bucket upper bound): {:.3} ms",
                        p99 * 1e3
                    ),
                    None => println!(
                        "  /metrics not served (or no {OVERHEAD_METRIC}): client-side added latency p99 {:.3} ms (ctxd p99 − baseline p99)",
                        ctxd_open.percentile_ms(0.99) - baseline_open.percentile_ms(0.99)
                    ),
                }
                overhead = Some(Overhead {
                    providers,
                    rate,
                    ctxd: ctxd_open,
                    baseline: baseline_open,
                });
            }
            let traces = ctxd.stop();
            println!("  traces: {}", traces.describe());
            runs.push(Run {
                providers,
                ctxd: ctxd_phase,
                baseline: baseline_phase,
                same_hop: Some(hop_phase),
                traces,
                compare,
            });
        }
    }

    let repeated = args.repeated.map(|fraction| {
        let providers = args.repeated_providers;
        let mocks = &addresses[..providers];
        let values = Values::Repeated(fraction);
        let cached = serve(
            &CtxdBinary::cached(),
            mocks,
            Workload {
                cache: true,
                values,
                upstream: Upstream::Mocks,
            },
        );
        let plain = serve(
            &CtxdBinary::bench(),
            mocks,
            Workload {
                cache: false,
                values,
                upstream: Upstream::Mocks,
            },
        );
        let settings = closed_loop_phase(providers);
        let mut phases = machine
            .interleave(&client_runtime, &[&cached.target, &plain.target], &settings)
            .into_iter();
        let run = Repeated {
            fraction,
            cached: phases.next().unwrap(),
            plain: phases.next().unwrap(),
        };
        println!(
            "\nrepeated values: {:.0} % of turns ask one of {HOT_VALUES} values, {providers} providers/turn; side cached: every provider cache = {{ ttl = \"60s\" }}\n{HEADER}",
            fraction * 100.0
        );
        println!("{}", fmt_row(&run.cached, None));
        let ratio = run.cached.throughput() / run.plain.throughput();
        println!("{}", fmt_row(&run.plain, Some(ratio)));
        for phase in [&run.cached, &run.plain] {
            warn_foreign(phase);
            println!(
                "  {}: {} upstream lookups for {} provider calls ({:.3} per call)",
                phase.side,
                phase.upstream_lookups,
                phase.turns() * phase.providers,
                phase.upstream_per_call()
            );
        }
        for served in [cached, plain] {
            println!("  {} traces: {}", served.target.name(), served.stop().describe());
        }
        run
    });

    let postgres_run = args.postgres.then(|| {
        client_runtime
            .block_on(postgres::prepare_data())
            .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e}", postgres::DSN));
        let providers = postgres::PROVIDERS;
        let workload = Workload {
            cache: false,
            values: postgres::VALUES,
            upstream: Upstream::Postgres,
        };
        let served = serve(&CtxdBinary::bench(), &addresses[..providers], workload);
        let raw_target = Arc::new(Target {
            client: client(pool),
            values: postgres::VALUES,
            asked: AtomicU64::new(0),
            side: Side::RawPostgres(postgres::Raw::new()),
        });
        let settings = closed_loop_phase(providers);
        let mut phases = machine
            .interleave(&client_runtime, &[&served.target, &raw_target], &settings)
            .into_iter();
        let (ctxd_phase, baseline_phase) = (phases.next().unwrap(), phases.next().unwrap());
        println!(
            "\npostgres: {providers} providers/turn, each one query against {} (pools of {} per provider on both sides)\n{HEADER}",
            postgres::DSN,
            postgres::POOL_SIZE
        );
        println!("{}", fmt_row(&ctxd_phase, None));
        let ratio = ctxd_phase.throughput() / baseline_phase.throughput();
        println!("{}", fmt_row(&baseline_phase, Some(ratio)));
        for phase in [&ctxd_phase, &baseline_phase] {
            warn_foreign(phase);
            if let Some(error) = &phase.recorded.first_error {
                println!(
                    "    {} errors: {} measured, {} in warm-up; first: {error}",
                    phase.side, phase.recorded.errors, phase.recorded.warmup_errors
                );
            }
        }
        let traces = served.stop();
        println!("  traces: {}", traces.describe());
        drop(raw_target);
        client_runtime.block_on(postgres::drop_data());
        Run {
            providers,
            ctxd: ctxd_phase,
            baseline: baseline_phase,
            same_hop: None,
            traces,
            compare: None,
        }
    });

    let soak = args.soak.map(|seconds| {
        println!(
            "\nsoak: {} providers/turn, {} concurrent, {:.0} s …",
            args.soak_providers,
            args.concurrency,
            seconds.as_secs_f64()
        );
        let soak = soak(
            &client_runtime,
            &addresses,
            args.soak_providers,
            args.concurrency,
            seconds,
            args.workers,
        );
        println!(
            "  RSS after the {} s warm-up {:.1} MiB, at the end {:.1} MiB ({SOAK_WINDOW} s means): growth {:.2} %; peak {:.1} MiB (+{:.2} %): {}; slope {:.0} KiB/min; {} errors",
            SOAK_WARMUP.as_secs(),
            soak.at_warmup_kib() as f64 / 1024.0,
            soak.end_kib() as f64 / 1024.0,
            soak.growth() * 100.0,
            soak.max_after_warmup_kib() as f64 / 1024.0,
            soak.peak_growth() * 100.0,
            if soak.flat() { "flat" } else { "NOT flat" },
            soak.slope_kib_per_minute(),
            soak.errors
        );
        std::fs::write(args.out.join("soak.svg"), soak_chart(&soak)).unwrap();
        soak
    });

    // Targets.
    let mut targets = Vec::new();
    if let Some(run) = runs.iter().find(|r| r.providers == 4) {
        let ratio = run.ctxd.throughput() / run.baseline.throughput();
        targets.push(
            json!({"target": "throughput at 4 providers/turn, 64 concurrent >= 0.7 x raw (no-hop) baseline",
            "concurrency": args.concurrency, "measured": ratio, "met": ratio >= 0.7}),
        );
        let cpu_us = run.ctxd.cpu_us_per_turn();
        targets.push(json!({"target": "ctxd CPU per 4-provider turn <= 120 us",
            "measured_us": cpu_us, "met": cpu_us <= 120.0}));
    }
    for (run, hop) in runs
        .iter()
        .filter(|r| r.providers == 4 || r.providers == 8)
        .filter_map(|r| Some((r, r.same_hop.as_ref()?)))
    {
        let ratio = run.ctxd.throughput() / hop.throughput();
        targets.push(json!({
            "target": format!("throughput at {} providers/turn, {} concurrent >= 0.7 x same-hop baseline", run.providers, args.concurrency),
            "measured": ratio, "met": ratio >= 0.7}));
    }
    // The target is read at half saturation only.
    if let Some(o) = overhead
        .as_ref()
        .filter(|_| args.open_load == HALF_SATURATION)
    {
        match o.ctxd.overhead_p99_seconds() {
            Some(p99) => targets.push(json!({"target": "coordinator overhead p99 <= 0.3 ms at half saturation",
                "measured_seconds": p99, "source": "/metrics ctxd_coordinator_overhead_seconds (bucket upper bound)",
                "met": p99 <= 0.000_3})),
            None => targets.push(json!({"target": "coordinator overhead p99 <= 0.3 ms at half saturation",
                "measured_seconds": null,
                "client_side_added_p99_ms": o.ctxd.percentile_ms(0.99) - o.baseline.percentile_ms(0.99),
                "source": "ctxd serves no /metrics yet: only the client-side added latency (ctxd p99 - baseline p99, same rate) is measured",
                "met": null})),
        }
    }
    if let Some(s) = &soak {
        targets.push(
            json!({"target": "RSS flat over the soak (growth < 5 % after 10 s warm-up)",
            "measured_growth": s.growth(), "measured_peak_growth": s.peak_growth(), "met": s.flat()}),
        );
    }

    let results = json!({
        "bench": "load",
        "ctxd_binary": env!("CARGO_BIN_EXE_ctxd"),
        "machine": {
            "cpus": cpus,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            "split": "no pinning: ctxd (its own process; actix workers = --workers or one per CPU), the client (bench-client tokio runtime) and the mocks (bench-mock tokio runtime) share every core; CPU is measured per component",
        },
        "settings": {
            "concurrency": args.concurrency,
            "same_hop_client": args.same_hop_client.name(),
            "provider_type": args.provider_type.name(),
            "warmup_seconds": args.warmup.as_secs_f64(),
            "rounds": args.rounds,
            "order": if args.compare_ctxd.is_some() {
                "interleaved A B C C B A ...: ctxd, baseline and compare alternate in slices of duration / rounds, each slice after its own warm-up; the half-saturation phase is ctxd and baseline only"
            } else {
                "interleaved A B B A ...: ctxd and baseline alternate in slices of duration / rounds, each slice after its own warm-up"
            },
            "duration_seconds": args.duration.as_secs_f64(),
            "providers": args.providers,
            "ctxd_workers": args.workers,
            "client_threads": args.client_threads,
            "mock_threads": args.mock_threads,
            "client_pool_max_idle_per_host": pool,
            "binding": "http providers, secret_env set, max_concurrency 1024, pool.max_idle_per_host 256, other settings default (timeout 1000 ms, retention digest)",
            "trace": "on, default writer (queue 8192, batches of 256 / 50 ms), SQLite store under target/bench",
        },
        "runs": runs.iter().map(|r| {
            let mut run = json!({
                "providers_per_turn": r.providers,
                "ctxd": r.ctxd.json(),
                "baseline": r.baseline.json(),
                "turns_answered_incl_warmup": r.traces.answered,
                "turns_in_trace_store": r.traces.stored,
                "trace_store_bytes_per_turn": r.traces.bytes_per_turn(),
                "same_hop": r.same_hop.as_ref().map(Phase::json),
                "same_hop_ratios": r.same_hop.as_ref().map(|hop| SameHop::of(&r.ctxd, hop).json()),
            });
            with_ratios(&mut run, &r.ctxd, &r.baseline);
            if let (Some(compared), Some(binary)) = (&r.compare, &args.compare_ctxd) {
                run["compare"] = compared.json(&r.ctxd, binary);
            }
            run
        }).collect::<Vec<_>>(),
        "half_saturation": overhead.as_ref().map(|o| json!({
            "providers_per_turn": o.providers,
            "fraction_of_closed_loop": args.open_load,
            "rate_per_second": o.rate,
            "ctxd": o.ctxd.json(),
            "baseline": o.baseline.json(),
            "coordinator_overhead_p99_seconds": o.ctxd.overhead_p99_seconds(),
            "metrics_available": o.ctxd.metrics.is_some(),
            "client_side_added_latency_ms": {
                "p50": o.ctxd.percentile_ms(0.5) - o.baseline.percentile_ms(0.5),
                "p99": o.ctxd.percentile_ms(0.99) - o.baseline.percentile_ms(0.99),
            },
        })),
        "soak": soak.as_ref().map(Soak::json),
        "repeated": repeated.as_ref().map(Repeated::json),
        "postgres": postgres_run.as_ref().map(|r| {
            let mut run = json!({
                "providers_per_turn": r.providers,
                "binding": format!("{} postgres providers, one query each, pool.max_size {}, max_concurrency 1024, other settings default", r.providers, postgres::POOL_SIZE),
                "baseline": "the same queries through tokio-postgres + deadpool-postgres pools of the same size, prepared once per connection, no ctxd",
                "ctxd": r.ctxd.json(),
                "baseline_figures": r.baseline.json(),
                "turns_answered_incl_warmup": r.traces.answered,
                "turns_in_trace_store": r.traces.stored,
            });
            with_ratios(&mut run, &r.ctxd, &r.baseline);
            run
        }),
        "targets": targets,
    });
    // A soak-only or repeated-only run does not overwrite the load results.
    let results_path = args
        .out
        .join(match (args.skip_load, &repeated, &postgres_run) {
            (false, _, _) => "results.json",
            (true, Some(_), _) => "repeated.json",
            (true, None, Some(_)) => "postgres.json",
            (true, None, None) => "soak.json",
        });
    std::fs::write(
        &results_path,
        serde_json::to_string_pretty(&results).unwrap(),
    )
    .unwrap();
    println!("\nwrote {}", results_path.display());

    if !runs.is_empty() {
        let mut panels: Vec<Panel<'_>> = runs
            .iter()
            .map(|r| Panel {
                title: format!(
                    "{} provider{} per turn",
                    r.providers,
                    if r.providers == 1 { "" } else { "s" }
                ),
                subtitle: format!(
                    "closed loop, {} concurrent; throughput ratio {:.2}",
                    args.concurrency,
                    r.ctxd.throughput() / r.baseline.throughput()
                ),
                ctxd: &r.ctxd,
                baseline: &r.baseline,
                same_hop: r.same_hop.as_ref(),
                compare: r.compare.as_ref().map(|c| &c.phase),
            })
            .collect();
        if let Some(o) = &overhead {
            panels.push(Panel {
                title: format!(
                    "{} providers per turn, {}",
                    o.providers,
                    open_load_label(args.open_load)
                ),
                subtitle: format!(
                    "open loop at {:.0} turns/s ({} × ctxd's closed-loop rate)",
                    o.rate, args.open_load
                ),
                ctxd: &o.ctxd,
                baseline: &o.baseline,
                same_hop: None,
                compare: None,
            });
        }
        let title = if compare_binary.is_some() {
            "ctxd vs compare vs raw baseline: turn latency distribution"
        } else {
            "ctxd vs raw baseline: turn latency distribution"
        };
        let svg = chart(
            &panels,
            title,
            &format!(
                "{cpus} CPUs shared by client, mock providers and ctxd; {} s measured per curve ({} interleaved slices, each after {} s warm-up); traces on",
                args.duration.as_secs_f64(),
                args.rounds,
                args.warmup.as_secs_f64()
            ),
        );
        let chart_path = args.out.join("latency.svg");
        std::fs::write(&chart_path, svg).unwrap();
        println!("wrote {}", chart_path.display());
        let points = scaling_points(&runs);
        println!(
            "\nscaling (closed loop, {} concurrent):\n{}",
            args.concurrency,
            scaling::table(&points)
        );
        let scaling_path = args.out.join("scaling.svg");
        let note = format!(
            "{cpus} CPUs shared by client, mock providers and the server; {} concurrent; {} s measured per point",
            args.concurrency,
            args.duration.as_secs_f64()
        );
        std::fs::write(&scaling_path, scaling::chart(&points, &note)).unwrap();
        println!("wrote {}", scaling_path.display());
    }
    let mock_requests: u64 = mocks
        .iter()
        .map(|m| m.requests.load(Ordering::Relaxed))
        .sum();
    let mock_connections: u64 = mocks
        .iter()
        .map(|m| m.connections.load(Ordering::Relaxed))
        .sum();
    println!("mock requests served: {mock_requests} over {mock_connections} connections");
    drop(client_runtime);
    mock_runtime.shutdown_background();
}
