//! (f) configuration: unknown fields are rejected, naming the field.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde::Deserialize as _;

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

/// The configuration the cloudhub Deployment runs with (deploy/cloud/cloudhub.yaml, the
/// ConfigMap's `cloudhub.yaml`) parses, with the health port the probes use.
#[test]
fn deployed_config_parses() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/cloud/cloudhub.yaml"
    );
    let manifest = std::fs::read_to_string(path).unwrap();
    let text = serde_norway::Deserializer::from_str(&manifest)
        .map(|doc| serde_norway::Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ConfigMap")
        .and_then(|cm| cm["data"]["cloudhub.yaml"].as_str().map(str::to_owned))
        .expect("a ConfigMap with cloudhub.yaml");
    let config = Config::from_yaml(&text, path).unwrap();
    assert_eq!(config.health_addr.port(), 10005);
    // The shipped CONNECT listener reaches edge nodes only (issue 31): dialling any other
    // `host:port` for a holder of an egress client certificate is opt-in.
    assert!(!config.streams.passthrough, "passthrough is off as shipped");
    // Nor does it read bootstrap-token Secrets in kube-system (issue 31): edges pin the CA,
    // token CA discovery is opt-in (deploy/cloud/optional/token-ca-discovery.yaml).
    assert!(
        !config.trust.token_ca_discovery,
        "token CA discovery is off as shipped"
    );
    assert!(
        manifest.contains("grpc: {port: 10005}"),
        "the probes use the health port"
    );
}
