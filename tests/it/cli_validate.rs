//! `ctxd validate`.

use crate::support::{ctxd, stderr_of, stdout_of};

#[test]
fn the_shipped_config_validates() {
    let output = ctxd()
        .args(["validate"])
        .env_remove("CTXD_DIGEST_KEY")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        stdout_of(&output),
        stderr_of(&output)
    );
    assert!(stdout_of(&output).contains("ok"), "{}", stdout_of(&output));
}
