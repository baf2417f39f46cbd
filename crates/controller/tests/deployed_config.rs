//! The configurations the controller Deployments run with (deploy/cloud/<controller>.yaml,
//! the ConfigMap's `<controller>.yaml`) parse, and agree with the rest of the manifest: the
//! probes' health port, the projected token's mount path.
#![allow(clippy::unwrap_used)]

use serde::Deserialize as _;
use verge_controller::Config;

/// The manifest text and its ConfigMap's `<controller>.yaml`.
fn deployed(controller: &str) -> (String, String) {
    let path = format!(
        "{}/../../deploy/cloud/{controller}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let manifest = std::fs::read_to_string(&path).unwrap();
    let key = format!("{controller}.yaml");
    let text = serde_norway::Deserializer::from_str(&manifest)
        .map(|doc| serde_norway::Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ConfigMap")
        .and_then(|cm| cm["data"][key.as_str()].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("{path} has no ConfigMap with {key}"));
    (manifest, text)
}

#[test]
fn controller_configs_parse_and_match_their_deployments() {
    for (controller, port) in [("edgecontroller", 10006), ("devicecontroller", 10007)] {
        let (manifest, text) = deployed(controller);
        let config = Config::from_yaml(&text, controller).unwrap();
        assert_eq!(
            config.health_addr.map(|a| a.port()),
            Some(port),
            "{controller}"
        );
        assert!(
            manifest.contains(&format!("grpc: {{port: {port}}}")),
            "{controller}"
        );
        assert_eq!(
            config.cloudhub_service.as_deref(),
            Some("verge-system/cloudhub-controllers")
        );
        assert!(config.leader_election.leader_elect, "{controller}");
        let token = config.cloudhub_auth.token_file.unwrap();
        let dir = token.parent().unwrap().display().to_string();
        assert!(
            manifest.contains(&format!("mountPath: {dir}")),
            "{controller}: the projected token is mounted at {dir}"
        );
    }
}
