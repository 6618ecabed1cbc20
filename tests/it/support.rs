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
