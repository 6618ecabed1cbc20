//! A real `ctxd serve` process for integration tests: a deployment written into a temp
//! dir (config, Project, Binding), the server started on `127.0.0.1:0`, its standard
//! error kept in a file so tests can grep every log line, and SIGTERM on request.

use crate::support::root;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A tenant written into a test deployment.
pub struct TenantSpec {
    pub id: &'static str,
    pub key: &'static str,
    pub max_in_flight: usize,
    /// The tenant's own `trace_keep`, if any.
    pub trace_keep: Option<&'static str>,
    /// `(project JSON, binding TOML)` pairs.
    pub projects: Vec<(String, String)>,
}

impl TenantSpec {
    pub fn new(id: &'static str, key: &'static str, project: String, binding: String) -> Self {
        TenantSpec {
            id,
            key,
            max_in_flight: 64,
            trace_keep: None,
            projects: vec![(project, binding)],
        }
    }
}

/// A deployment in a temp dir, removed when dropped.
pub struct Deployment {
    _dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Deployment {
    pub fn new(tenants: &[TenantSpec]) -> Deployment {
        Deployment::with_trace(tenants, "")
    }

    /// With extra `[trace]` lines (queue capacity, batch window …).
    pub fn with_trace(tenants: &[TenantSpec], trace_extra: &str) -> Deployment {
        Deployment::with_store(tenants, "data/traces.db", trace_extra)
    }

    /// With the trace store at `store` (relative to the deployment's folder, or
    /// absolute) and extra `[trace]` lines.
    pub fn with_store(tenants: &[TenantSpec], store: &str, trace_extra: &str) -> Deployment {
        Deployment::written(tenants, "", store, trace_extra)
    }

    /// With extra `[server]` lines.
    pub fn with_server(tenants: &[TenantSpec], server_extra: &str) -> Deployment {
        Deployment::written(tenants, server_extra, "data/traces.db", "")
    }

    fn written(
        tenants: &[TenantSpec],
        server_extra: &str,
        store: &str,
        trace_extra: &str,
    ) -> Deployment {
        let dir = tempfile::tempdir().unwrap();
        let mut config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace_ms = 5000\n{server_extra}\n\n\
             [trace]\nstore = \"sqlite:{store}\"\ndigest_key_env = \"CTXD_TEST_DIGEST_KEY\"\n\
             generate_digest_key = true\n{trace_extra}\n\n[limits]\nmax_turn_ms = 10000\n",
        );
        for tenant in tenants {
            let hash = hex::encode(Sha256::digest(tenant.key.as_bytes()));
            config.push_str(&format!(
                "\n[[tenants]]\nid = \"{}\"\napi_key_sha256 = \"{hash}\"\nmax_in_flight = {}\n",
                tenant.id, tenant.max_in_flight
            ));
            if let Some(keep) = tenant.trace_keep {
                config.push_str(&format!("trace_keep = {keep:?}\n"));
            }
            for (i, (project, binding)) in tenant.projects.iter().enumerate() {
                let project_file = format!("{}-project-{i}.json", tenant.id);
                let binding_file = format!("{}-binding-{i}.toml", tenant.id);
                std::fs::write(dir.path().join(&project_file), project).unwrap();
                std::fs::write(dir.path().join(&binding_file), binding).unwrap();
                config.push_str(&format!(
                    "[[tenants.projects]]\npath = \"{project_file}\"\nbinding = \"{binding_file}\"\n"
                ));
            }
        }
        let config_path = dir.path().join("ctxd.toml");
        std::fs::write(&config_path, config).unwrap();
        Deployment {
            _dir: dir,
            config: config_path,
        }
    }

    /// The trace store file of this deployment.
    pub fn store(&self) -> PathBuf {
        self.config.parent().unwrap().join("data/traces.db")
    }
}

/// A running `ctxd serve`.
pub struct Ctxd {
    child: Child,
    pub base: String,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Ctxd {
    /// Starts `ctxd serve --config CONFIG --listen 127.0.0.1:0 EXTRA…` and waits until it
    /// prints its address.
    pub fn start(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Ctxd {
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("stderr.log");
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("ctxd"));
        command
            .current_dir(root())
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .env("CTXD_LOG", "debug")
            .env_remove("CTXD_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("ctxd starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(address) = line.strip_prefix("ctxd listening on ") {
                    let _ = tx.send(address.to_owned());
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                let logs = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("ctxd did not start:\n{logs}");
            }
        };
        Ctxd {
            child,
            base,
            log,
            _log_dir: log_dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit (at most `limit`).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                panic!("ctxd did not exit within {limit:?}:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything ctxd wrote to standard error so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Ctxd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client for ctxd's API.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `POST /v1/turns` with a bearer key; returns the status and the JSON body.
pub async fn turn(ctxd: &Ctxd, key: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(ctxd.url("/v1/turns"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("ctxd answers");
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

/// `GET path` with a bearer key; returns the status and the JSON body.
pub async fn get(ctxd: &Ctxd, key: &str, path: &str) -> (u16, Value) {
    let response = client()
        .get(ctxd.url(path))
        .bearer_auth(key)
        .send()
        .await
        .expect("ctxd answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The `/metrics` exposition of a running ctxd.
pub async fn metrics_of(ctxd: &Ctxd) -> String {
    let response = client().get(ctxd.url("/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

/// The provider entry of a turn response.
pub fn provider<'a>(response: &'a Value, id: &str) -> &'a Value {
    response["providers"]
        .as_array()
        .and_then(|providers| providers.iter().find(|p| p["id"] == id))
        .unwrap_or_else(|| panic!("no provider {id} in {response:#}"))
}

/// The status of a layer in a turn response.
pub fn layer_status<'a>(response: &'a Value, id: &str) -> &'a str {
    response["layers"]
        .as_array()
        .and_then(|layers| layers.iter().find(|l| l["id"] == id))
        .and_then(|l| l["status"].as_str())
        .unwrap_or_else(|| panic!("no layer {id} in {response:#}"))
}

/// `GET /v1/traces/{turnId}` with a bearer key, polled until the trace writer has
/// committed the turn (traces appear within the batch window).
pub async fn trace_of(ctxd: &Ctxd, key: &str, turn_id: &str) -> Value {
    for _ in 0..200 {
        let response = client()
            .get(ctxd.url(&format!("/v1/traces/{turn_id}")))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            return response.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("turn {turn_id} never reached the trace store");
}
