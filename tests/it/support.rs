//! Helpers shared by the integration tests.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The repository root (where `Cargo.toml` is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The demo Project shipped in `fixtures/demo/`.
pub fn demo_project() -> PathBuf {
    root().join("fixtures/demo/project.json")
}

/// `ctxd` run from the repository root with a clean environment for ctxd's variables.
pub fn ctxd() -> Command {
    let mut command = Command::cargo_bin("ctxd").expect("the ctxd binary is built");
    command.current_dir(root());
    command
}

pub fn stdout_of(output: &std::process::Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("utf-8 output")
}

pub fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("utf-8 output")
}

/// Writes a file, creating its folder.
pub fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// The machine's PostgreSQL as its superuser (trust auth; `.ci/run` starts it).
pub(crate) const POSTGRES_ADMIN_DSN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// A connection to [`POSTGRES_ADMIN_DSN`], driven on the test's runtime.
pub(crate) async fn postgres_admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(POSTGRES_ADMIN_DSN, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL runs on 127.0.0.1:5432 (.ci/run starts it)");
    tokio::spawn(connection);
    client
}
