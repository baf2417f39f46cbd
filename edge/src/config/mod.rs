//! edgecore's configuration: one YAML file (`--config`), strict (`deny_unknown_fields`), every
//! field optional with the default documented on it; common fields are overridable by flags.
//!
//! Laid out like KubeEdge's `edgecore.yaml` (top-level node settings, then one section per
//! module), in camelCase like every Kubernetes component configuration:
//!
//! ```yaml
//! nodeName: edge-1                  # default: the host name
//! dataDir: /var/lib/verge/edgecore
//! metricsAddr: 127.0.0.1:10008      # /metrics and /healthz; null: off
//! logFormat: text                   # or json
//! shutdownGrace: 10s
//! tracing:                          # OpenTelemetry export, off by default
//!   otlpEndpoint: http://127.0.0.1:4317
//!   samplingRatio: 1.0
//! edgeHub:                          # see EdgeHubConfig
//!   server: https://cloudhub:10000
//!   token: ""                      # bootstrap token: join on start
//! edged:                            # see EdgedConfig: KubeletConfiguration names
//!   maxPods: 110
//!   nodeStatusUpdateFrequency: 10s  # computed this often, sent when changed
//!   nodeStatusReportFrequency: 5m   # or when unchanged this long
//!   podSandboxImage: registry.k8s.io/pause:3.10
//! deviceTwin:                       # see DeviceTwinConfig: twins, DMI server, mappers
//!   enable: true
//!   dmiSocket: /etc/kubeedge/dmi.sock
//!   mapperCallTimeout: 10s
//! eventBus:                         # see EventBusConfig: MQTT for edge apps
//!   enable: false
//!   mqttServer: tcp://127.0.0.1:1883
//! ```

#[cfg(test)]
mod eventbus_tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use verge_devicetwin::DeviceTwinConfig;
pub use verge_edge_api::EdgeApiConfig;
pub use verge_edge_net::NetworkConfig;
pub use verge_edged::config::{
    CrashLoopBackOffConfig, EdgedConfig, EdgedSettings, Reserved, ReservedConfig, TaintConfig,
};
pub use verge_edged::gc::GcConfig;
pub use verge_edgehub::EdgeHubConfig;
pub use verge_eventbus::{EventBusConfig, MqttQos};
pub use verge_streaming::StreamingConfig;
pub use verge_telemetry::{LogFormat, TracingConfig};

use crate::{Error, Result};

/// The default port of edgecore's metrics endpoint ([`Config::metrics_addr`]).
pub const DEFAULT_METRICS_PORT: u16 = 10008;

/// The configuration of one edgecore.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Config {
    /// The Kubernetes node name. Default: the host name, lower-cased (flag `--node-name`).
    pub node_name: String,
    /// Where the redb store (`edgecore.redb`) and pod directories live; its filesystem is
    /// reported as `ephemeral-storage`. Default `/var/lib/verge/edgecore` (flag `--data-dir`).
    pub data_dir: PathBuf,
    /// Log line format, `text` or `json`. Default `text` (flag `--log-format`).
    pub log_format: LogFormat,
    /// How long the modules get to stop after SIGINT/SIGTERM before the process exits
    /// anyway (pods keep running either way). Default `10s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Where edgecore serves `GET /metrics` (Prometheus, OpenMetrics text; the series are in
    /// docs/observability.md) and `/healthz`, `/readyz` and gRPC `grpc.health.v1` (as the
    /// cloud services' health endpoint); `null` serves nothing. Default `127.0.0.1:10008`:
    /// loopback, so a small agent opens no port to the network unless told to (scrape it
    /// through a node-local agent, or set the node's address); port 10008 follows Verge's
    /// cloud ports (10000-10002, health 10005-10007) and stays clear of the kubelet's
    /// (10248, 10250, 10255) and KubeEdge's edgecore (10350, 10550), so it can run beside
    /// them on a node being migrated.
    pub metrics_addr: Option<SocketAddr>,
    /// edgehub: the link to cloudhub (KubeEdge `modules.edgeHub`).
    pub edge_hub: EdgeHubConfig,
    /// edged: node status, Lease and pods (KubeEdge `modules.edged`, kubelet names).
    pub edged: EdgedConfig,
    /// devicetwin: device twins and the DMI server for mappers (KubeEdge
    /// `modules.deviceTwin`).
    pub device_twin: DeviceTwinConfig,
    /// eventBus: the MQTT client of KubeEdge's device topics (KubeEdge `modules.eventBus`).
    pub event_bus: EventBusConfig,
    /// streaming: kubectl logs/exec/attach/port-forward through cloudhub (the kubelet's
    /// streaming API).
    pub streaming: StreamingConfig,
    /// network: the node's Service proxy (the pod network itself follows the Node's
    /// `spec.podCIDR`; [`NetworkConfig`]).
    pub network: NetworkConfig,
    /// edgeApi: the Kubernetes API on the node for its pods' in-cluster clients, at the
    /// `kubernetes` Service ([`EdgeApiConfig`]; needs `network.serviceProxy`).
    pub edge_api: EdgeApiConfig,
    /// OpenTelemetry trace export (`otlpEndpoint`, `samplingRatio`); off by default (flag
    /// `--otlp-endpoint`). See [`TracingConfig`].
    pub tracing: TracingConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_name: default_node_name(),
            data_dir: PathBuf::from("/var/lib/verge/edgecore"),
            log_format: LogFormat::Text,
            shutdown_grace: Duration::from_secs(10),
            metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT))),
            edge_hub: EdgeHubConfig::default(),
            edged: EdgedConfig::default(),
            device_twin: DeviceTwinConfig::default(),
            event_bus: EventBusConfig::default(),
            streaming: StreamingConfig::default(),
            network: NetworkConfig::default(),
            edge_api: EdgeApiConfig::default(),
            tracing: TracingConfig::default(),
        }
    }
}

/// The host name, lower-cased (a node name must be a DNS-1123 subdomain); `localhost` if unknown.
fn default_node_name() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map_or_else(|| "localhost".to_owned(), |h| h.to_lowercase())
}

impl Config {
    /// Parses YAML `text` (named `source_name` in errors) and validates it.
    ///
    /// # Errors
    /// [`Error::ConfigParse`] naming an unknown or mistyped field; [`Error::ConfigValue`] for a
    /// value that parses but cannot be used.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Self> {
        let config: Self = verge_core::from_yaml(text, source_name)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses the file at `path` (see [`Config::from_yaml`]).
    ///
    /// # Errors
    /// [`Error::ConfigRead`] if the file cannot be read, else as [`Config::from_yaml`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// The configuration as YAML that [`Config::from_yaml`] reads back unchanged.
    ///
    /// # Errors
    /// Never for a `Config` built by this crate; the serializer's error otherwise.
    pub fn to_yaml(&self) -> std::result::Result<String, serde_norway::Error> {
        serde_norway::to_string(self)
    }

    /// Checks values that serde cannot: a usable node name, positive intervals, parsable
    /// quantities.
    ///
    /// # Errors
    /// [`Error::ConfigValue`] naming the first bad field by its YAML path
    /// (e.g. `edged.systemReserved.cpu`).
    pub fn validate(&self) -> Result<()> {
        let value = |(field, reason)| Error::ConfigValue { field, reason };
        if self.node_name.is_empty() || self.node_name.contains('/') {
            return Err(value((
                "nodeName",
                "must be a non-empty DNS-1123 subdomain".to_owned(),
            )));
        }
        self.edge_hub.validate().map_err(value)?;
        self.edged.validate().map_err(value)?;
        self.device_twin.validate().map_err(value)?;
        self.event_bus.validate().map_err(value)
    }

    /// The redb file: `<dataDir>/edgecore.redb`.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("edgecore.redb")
    }

    /// Where pod directories (volumes) live: `<dataDir>/pods`, one `<pod uid>/` each.
    pub fn pods_dir(&self) -> PathBuf {
        self.data_dir.join("pods")
    }

    /// What edged and the node agent read of this configuration: `nodeName`, `dataDir`, the
    /// `edged:` section and `streaming.port`.
    pub fn edged_settings(&self) -> EdgedSettings {
        EdgedSettings {
            node_name: self.node_name.clone(),
            data_dir: self.data_dir.clone(),
            edged: self.edged.clone(),
            streaming_port: self.streaming.port,
            cluster_domain: self.network.cluster_domain.clone(),
        }
    }

    /// `edged.registerWithTaints` as a join sends them: cloudhub creates the Node with these
    /// taints (the kubelet's `--register-with-taints`, which applies at creation only).
    pub fn register_with_taints(&self) -> Vec<verge_edgehub::certificates::Taint> {
        self.edged
            .register_with_taints
            .iter()
            .map(|t| verge_edgehub::certificates::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect()
    }

    /// What edgehub and the node's certificates read of this configuration: `nodeName`,
    /// `dataDir` and the `edgeHub:` section.
    pub fn hub_settings(&self) -> verge_edgehub::HubSettings {
        verge_edgehub::HubSettings {
            node_name: self.node_name.clone(),
            data_dir: self.data_dir.clone(),
            edge_hub: self.edge_hub.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::from_yaml("", "t.yaml").expect("defaults");
        assert_eq!(c.edge_hub.server, "https://127.0.0.1:10000");
        assert!(c.edge_hub.server_alternates.is_empty());
        assert_eq!(c.edged.max_pods, 110);
        assert_eq!(
            c.edged.node_status_update_frequency,
            Duration::from_secs(10)
        );
        assert_eq!(
            c.edged.node_status_report_frequency,
            Duration::from_secs(300)
        );
        assert_eq!(c.edged.node_lease_duration_seconds, 40);
        assert!(c.device_twin.enable);
        assert_eq!(
            c.device_twin.dmi_socket,
            Path::new("/etc/kubeedge/dmi.sock")
        );
    }

    #[test]
    fn sections_parse_with_kubelet_names() {
        let err = Config::from_yaml("node_name: x\n", "edgecore.yaml").expect_err("snake_case");
        assert!(err.to_string().contains("node_name"), "{err}");
        let yaml = "nodeName: edge-1\n\
                    edgeHub: {server: http://hub-1:10000, serverAlternates: [http://hub-2:10000]}\n\
                    edged:\n  nodeStatusUpdateFrequency: 200ms\n  nodeIP: 10.0.0.5\n\
                    \x20 nodeStatusReportFrequency: 1m\n\
                    \x20 registerWithTaints: [{key: k, effect: NoSchedule}]\n\
                    \x20 systemReserved: {cpu: 500m, memory: 1Gi}\n\
                    \x20 crashLoopBackOff: {maxContainerRestartPeriod: 1m}\n";
        let c = Config::from_yaml(yaml, "edgecore.yaml").expect("valid");
        assert_eq!(c.node_name, "edge-1");
        assert_eq!(c.edge_hub.server_alternates, ["http://hub-2:10000"]);
        assert_eq!(
            c.edged.node_status_update_frequency,
            Duration::from_millis(200)
        );
        assert_eq!(
            c.edged.node_status_report_frequency,
            Duration::from_secs(60)
        );
        assert_eq!(c.edged.register_with_taints[0].value, "");
        let sent = c.register_with_taints();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            (
                sent[0].key.as_str(),
                sent[0].value.as_str(),
                sent[0].effect.as_str()
            ),
            ("k", "", "NoSchedule")
        );
        assert_eq!(
            c.edged.crash_loop_back_off.max_container_restart_period,
            Duration::from_secs(60)
        );
        let r = c.edged_settings().reserved().expect("quantities");
        assert_eq!((r.cpu_millis, r.memory_bytes), (500, 1 << 30));
    }

    #[test]
    fn yaml_round_trip() {
        let mut c = Config {
            node_name: "edge-7".to_owned(),
            ..Config::default()
        };
        c.edged.node_ip = Some([10, 0, 0, 7].into());
        c.edged.pod_sandbox_command = vec!["sleep".to_owned(), "1".to_owned()];
        c.edged.system_reserved.cpu = Some("250m".to_owned());
        let text = c.to_yaml().expect("serialize");
        assert_eq!(Config::from_yaml(&text, "t").expect("parse"), c, "{text}");
    }

    #[test]
    fn unknown_field_is_rejected_by_name() {
        let err = Config::from_yaml("nodeNmae: x\n", "edgecore.yaml").expect_err("unknown");
        let msg = err.to_string();
        assert!(
            msg.contains("nodeNmae") && msg.contains("edgecore.yaml"),
            "{msg}"
        );
        let err = Config::from_yaml("edged: {systemReserved: {gpu: 1}}\n", "e").expect_err("?");
        assert!(err.to_string().contains("gpu"), "{err}");
        let err = Config::from_yaml("maxPods: 3\n", "e").expect_err("belongs to edged");
        assert!(err.to_string().contains("maxPods"), "{err}");
        // Gone since edgecontroller renews the Lease while the session lasts.
        let err = Config::from_yaml("edged: {nodeLeaseRenewInterval: 10s}\n", "e")
            .expect_err("removed field");
        assert!(err.to_string().contains("nodeLeaseRenewInterval"), "{err}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let err =
            Config::from_yaml("edged: {systemReserved: {cpu: lots}}\n", "e").expect_err("bad");
        assert!(
            err.to_string().contains("edged.systemReserved.cpu"),
            "{err}"
        );
        let err = Config::from_yaml(
            "edged: {registerWithTaints: [{key: k, effect: Never}]}\n",
            "e",
        )
        .expect_err("bad");
        assert!(err.to_string().contains("registerWithTaints"), "{err}");
        let err =
            Config::from_yaml("edged: {nodeStatusReportFrequency: 0s}\n", "e").expect_err("bad");
        assert!(
            err.to_string().contains("edged.nodeStatusReportFrequency"),
            "{err}"
        );
        let err = Config::from_yaml("edgeHub: {outbox: {maxInflight: 0}}\n", "e").expect_err("bad");
        assert!(
            err.to_string().contains("edgeHub.outbox.maxInflight"),
            "{err}"
        );
    }
}
