//! The Docker engine answers and the busybox test image is built the way a fresh
//! machine builds it.

use std::process::Command;

#[test]
fn imported_busybox_image_runs_a_shell() -> anyhow::Result<()> {
    verge_testkit::docker::ensure_docker()?;
    let reference = format!("verge-test/busybox:selftest-{}", std::process::id());
    verge_testkit::docker::import_busybox_image(&reference)?;
    let out = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network=none",
            &reference,
            "sh",
            "-c",
            "echo hello from $(id -un)",
        ])
        .output()?;
    let _ = Command::new("docker")
        .args(["image", "rm", "-f", &reference])
        .output();
    assert!(
        out.status.success(),
        "docker run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello from root"
    );
    Ok(())
}

#[test]
fn test_image_exists_after_ensure() -> anyhow::Result<()> {
    verge_testkit::docker::ensure_docker()?;
    verge_testkit::docker::ensure_test_image()?;
    assert!(verge_testkit::docker::image_exists(
        verge_testkit::docker::TEST_IMAGE
    ));
    Ok(())
}
