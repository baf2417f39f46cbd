//! `ChildProcess` captures output, reports liveness, stops gracefully or hard, and
//! kills on drop.

use std::time::Duration;

use verge_testkit::process::ChildProcess;

#[tokio::test]
async fn child_process_lifecycle() -> anyhow::Result<()> {
    let mut child = ChildProcess::spawn(
        "/bin/sh",
        [
            "-c",
            "echo started $GREETING; trap 'echo bye; exit 3' TERM; while :; do sleep 0.05; done",
        ],
        [("GREETING", "hi")],
    )?;
    child
        .wait_for_log("started hi", Duration::from_secs(10))
        .await?;
    assert!(child.is_running());
    let status = child.terminate(Duration::from_secs(10)).await?;
    assert_eq!(status.code(), Some(3), "log: {}", child.log());
    assert!(!child.is_running());
    assert!(child.log_tail(1).contains("bye"));

    let mut hard = ChildProcess::spawn("/bin/sleep", ["30"], std::iter::empty::<(&str, &str)>())?;
    assert!(hard.is_running());
    let status = hard.kill9()?;
    assert!(!status.success());

    let dropped = ChildProcess::spawn("/bin/sleep", ["30"], std::iter::empty::<(&str, &str)>())?;
    let pid = dropped.pid();
    drop(dropped);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "killed and reaped on drop"
    );
    Ok(())
}

#[test]
fn workspace_bin_names_the_fix_when_missing() {
    let err = verge_testkit::process::workspace_bin("no-such-binary-xyz")
        .expect_err("a missing binary is an error");
    assert!(err.to_string().contains("cargo build --bins"), "{err}");
}
