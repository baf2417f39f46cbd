//! edgecore's configuration file for the local deployment's edge nodes: one text for the node
//! on the host ([`super::start`]) and the namespaced ones of a site ([`super::extra_edges`]),
//! so that every node runs with the same settings.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

/// The settings of one edge node that differ between nodes; [`EdgeYaml::render`] adds those
/// every local node shares.
#[derive(Debug, Clone)]
pub struct EdgeYaml<'a> {
    /// `nodeName`.
    pub node_name: &'a str,
    /// `dataDir`.
    pub data_dir: &'a Path,
    /// cloudhub's edge address, `https://<host>:<port>`.
    pub server: String,
    /// cloudhub's join address, `https://<host>:<port>`.
    pub join_server: String,
    /// The name cloudhub's certificate is checked for, when `server` is an address it does
    /// not name (cloudhub's certificate names `localhost` and `127.0.0.1`).
    pub tls_server_name: Option<&'a str>,
    /// The bootstrap token.
    pub token: &'a str,
    /// The Verge CA's pin, `sha256:<hex>`.
    pub ca_cert_hash: &'a str,
    /// `edged.nodeIP` (default: the host's first address).
    pub node_ip: Option<Ipv4Addr>,
    /// `edged.nodeLabels`.
    pub node_labels: &'a [(String, String)],
    /// `edged.containerRuntimeEndpoint` (default: the host's Docker).
    pub runtime_endpoint: Option<String>,
    /// `deviceTwin.dmiSocket`.
    pub dmi_socket: &'a Path,
    /// `eventBus`: the MQTT broker's URL and the file of its password (none: off).
    pub event_bus: Option<(&'a str, &'a Path)>,
    /// `metricsAddr` (default edgecore's `127.0.0.1:10008`).
    pub metrics_addr: Option<String>,
}

impl EdgeYaml<'_> {
    /// The file's text. Every local node uses the test image as its pod sandbox (no registry
    /// is reached), never garbage-collects images (the engine may be this machine's own, with
    /// the user's images), and has an 8 s Lease: the kit's control plane marks a node
    /// NotReady 10 s after its last heartbeat (`ControlPlaneConfig::node_monitor_grace_period`,
    /// short for tests), and edgecontroller renews the Lease every quarter of its duration, so
    /// an 8 s Lease (renewed every 2 s) keeps the node Ready where the default 40 s one
    /// (renewed every 10 s) would not.
    pub fn render(&self) -> String {
        let mut text = format!(
            "nodeName: {}\ndataDir: {}\nedgeHub:\n  server: {}\n  joinServer: {}\n  token: {}\n\
             \x20 caCertHash: {}\n",
            self.node_name,
            self.data_dir.display(),
            self.server,
            self.join_server,
            self.token,
            self.ca_cert_hash,
        );
        if let Some(name) = self.tls_server_name {
            let _ = writeln!(text, "  tlsServerName: {name}");
        }
        let _ = write!(
            text,
            "edged:\n  podSandboxImage: {}\n  podSandboxCommand: {:?}\n\
             \x20 gc: {{imageGCHighThresholdPercent: 100}}\n  nodeLeaseDurationSeconds: 8\n",
            verge_testkit::docker::TEST_IMAGE,
            verge_testkit::docker::TEST_SANDBOX_COMMAND,
        );
        if let Some(ip) = self.node_ip {
            let _ = writeln!(text, "  nodeIP: {ip}");
        }
        if !self.node_labels.is_empty() {
            let labels: Vec<String> = self
                .node_labels
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let _ = writeln!(text, "  nodeLabels: {{{}}}", labels.join(", "));
        }
        if let Some(endpoint) = &self.runtime_endpoint {
            let _ = writeln!(text, "  containerRuntimeEndpoint: {endpoint}");
        }
        let _ = writeln!(
            text,
            "deviceTwin:\n  dmiSocket: {}",
            self.dmi_socket.display()
        );
        if let Some((url, password_file)) = self.event_bus {
            let _ = writeln!(
                text,
                "eventBus:\n  enable: true\n  mqttServer: {url}\n  username: {}\n  passwordFile: {}",
                verge_testkit::mosquitto::MOSQUITTO_USER,
                password_file.display(),
            );
        }
        if let Some(addr) = &self.metrics_addr {
            let _ = writeln!(text, "metricsAddr: {addr}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base<'a>(labels: &'a [(String, String)]) -> EdgeYaml<'a> {
        EdgeYaml {
            node_name: "n1",
            data_dir: Path::new("/run/n1/edge"),
            server: "https://127.0.0.1:1".to_owned(),
            join_server: "https://127.0.0.1:2".to_owned(),
            tls_server_name: None,
            token: "abcdef.0123456789abcdef",
            ca_cert_hash: "sha256:00",
            node_ip: None,
            node_labels: labels,
            runtime_endpoint: None,
            dmi_socket: Path::new("/run/n1/dmi.sock"),
            event_bus: None,
            metrics_addr: None,
        }
    }

    #[test]
    fn the_node_on_the_host_has_the_shared_settings_only() {
        let text = base(&[]).render();
        assert!(text.starts_with("nodeName: n1\ndataDir: /run/n1/edge\nedgeHub:\n"));
        assert!(text.contains("  nodeLeaseDurationSeconds: 8\n"), "{text}");
        assert!(
            text.contains("  gc: {imageGCHighThresholdPercent: 100}\n"),
            "{text}"
        );
        for absent in [
            "tlsServerName",
            "nodeIP",
            "nodeLabels",
            "containerRuntime",
            "eventBus",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
    }

    #[test]
    fn a_namespaced_node_names_its_address_site_engine_and_hub() {
        let labels = [("verge.io/site".to_owned(), "quickstart".to_owned())];
        let text = EdgeYaml {
            server: "https://10.213.201.1:1".to_owned(),
            tls_server_name: Some("localhost"),
            node_ip: Some(Ipv4Addr::new(10, 214, 200, 2)),
            runtime_endpoint: Some("unix:///d/docker.sock".to_owned()),
            ..base(&labels)
        }
        .render();
        assert!(
            text.contains("  server: https://10.213.201.1:1\n"),
            "{text}"
        );
        assert!(
            text.contains("  tlsServerName: localhost\nedged:\n"),
            "{text}"
        );
        assert!(text.contains("  nodeIP: 10.214.200.2\n"), "{text}");
        assert!(
            text.contains("  nodeLabels: {verge.io/site: quickstart}\n"),
            "{text}"
        );
        assert!(
            text.contains("  containerRuntimeEndpoint: unix:///d/docker.sock\ndeviceTwin:\n"),
            "{text}"
        );
    }
}
