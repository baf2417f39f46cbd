//! (f) configuration: unknown fields are rejected, naming the field.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use verge_cloudhub::Config;

#[test]
fn unknown_field_is_named() {
    let error = Config::from_yaml(
        "edgeAddr: 127.0.0.1:1\nkeepaliveIntervall: 5s\n",
        "cloudhub.yaml",
    )
    .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("keepaliveIntervall") && text.contains("cloudhub.yaml"),
        "{text}"
    );
}

#[test]
fn binary_refuses_bad_config() {
    let dir = std::env::temp_dir().join(format!("cloudhub-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cloudhub.yaml");
    std::fs::write(&path, "tokn: x\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_cloudhub"))
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tokn"), "{stderr}");
}
