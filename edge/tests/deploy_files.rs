//! The edge install files in `deploy/edge` stay in step with edgecore: the example
//! configuration parses (unknown fields are errors) and the systemd unit runs the binary with
//! the path the configuration is documented at.

use std::path::PathBuf;

use verge_edgecore::Config;

fn deploy_edge(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/edge")
        .join(file)
}

#[test]
fn example_config_parses_with_documented_values() {
    let config = Config::load(&deploy_edge("edgecore.yaml")).expect("deploy/edge/edgecore.yaml");
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/verge/edgecore"));
    assert_eq!(
        config.edge_hub.tls_server_name.as_deref(),
        Some("cloudhub.verge-system.svc")
    );
    assert!(config.edge_hub.server.ends_with(":10000"));
}

#[test]
fn unit_runs_edgecore_with_the_config_path() {
    let unit = std::fs::read_to_string(deploy_edge("edgecore.service")).expect("unit file");
    let exec: Vec<&str> = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart=")
        .split_whitespace()
        .collect();
    assert_eq!(
        exec,
        [
            "/usr/local/bin/edgecore",
            "--config",
            "/etc/verge/edgecore.yaml"
        ]
    );
    assert!(
        unit.contains("KillMode=process"),
        "pods must outlive edgecore"
    );
    assert!(
        !unit.contains("example.invalid"),
        "placeholder documentation URL"
    );
}
