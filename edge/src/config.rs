//! edgecore's configuration: one YAML file (`--config`), strict (`deny_unknown_fields`), every
//! field optional with the default documented on it; common fields are overridable by flags.
//!
//! Names and defaults follow the kubelet's `KubeletConfiguration` where a kubelet concept
//! exists (`nodeStatusUpdateFrequency`, `nodeLeaseDurationSeconds`, `maxPods`,
//! `systemReserved`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::edged::gc::GcConfig;
use crate::edgehub::OutboxConfig;
use crate::node::quantity;
use crate::{Error, Result};

/// The configuration of one edgecore.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The Kubernetes node name. Default: the host name (flag `--node-name`).
    pub node_name: String,
    /// cloudhub's EdgeHub address. Default `http://127.0.0.1:10000` (flag `--cloudhub`).
    pub cloudhub: String,
    /// Further cloudhub addresses, for deployments without a load-balancing Service (in
    /// Kubernetes, the Service address in `cloudhub` alone suffices). After a failed
    /// connect or an ended session, the next attempt goes to the next address of
    /// `[cloudhub] + cloudhub_alternates`, round-robin; the reconnect backoff applies before
    /// every attempt (reset after a session that got its `Welcome`). Default none.
    pub cloudhub_alternates: Vec<String>,
    /// Bootstrap token sent in `EdgeHello`. Default empty (flag `--token`).
    pub token: String,
    /// Where the redb store (`edgecore.redb`) lives; its filesystem is reported as
    /// `ephemeral-storage`. Default `/var/lib/verge/edgecore` (flag `--data-dir`).
    pub data_dir: PathBuf,
    /// The node's InternalIP. Default: the first non-loopback IPv4 of the host (flag `--node-ip`).
    pub node_ip: Option<IpAddr>,
    /// Log line format, `text` or `json`. Default `text` (flag `--log-format`).
    pub log_format: LogFormat,
    /// Extra node labels, merged over the built-in ones. Default none.
    pub labels: BTreeMap<String, String>,
    /// Node taints registered with the node. Default none.
    pub taints: Vec<TaintConfig>,
    /// `pods` capacity (kubelet `maxPods`). Default 110.
    pub max_pods: u32,
    /// Resources held back from pods (kubelet `systemReserved`); allocatable = capacity minus
    /// these. Default none.
    pub system_reserved: ReservedConfig,
    /// How often the node status is reported (kubelet `nodeStatusUpdateFrequency`). Default `10s`.
    #[serde(with = "humantime_serde")]
    pub node_status_update_frequency: Duration,
    /// How often the node lease is renewed (kubelet: a quarter of the lease duration).
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    pub node_lease_renew_interval: Duration,
    /// `spec.leaseDurationSeconds` of the node lease (kubelet `nodeLeaseDurationSeconds`).
    /// Default 40.
    pub node_lease_duration_seconds: i32,
    /// First reconnect delay; doubles per failed attempt. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_initial_backoff: Duration,
    /// Largest reconnect delay. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_backoff: Duration,
    /// Bound on establishing a session: TCP/HTTP2 connect, and again for the `Welcome`.
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Capacity of the upstream queue (messages waiting for the stream). Default 1024.
    pub upstream_queue: usize,
    /// Capacity of the downstream queue (messages waiting for metamanager). Default 1024.
    pub downstream_queue: usize,
    /// The Docker engine edged drives, e.g. `unix:///run/docker.sock` or `tcp://host:2375`.
    /// Default none: the local socket (`unix:///var/run/docker.sock`, or `DOCKER_HOST`).
    pub docker_endpoint: Option<String>,
    /// Image of the pod sandbox ("infra"/pause) container that holds each pod's network
    /// namespace (kubelet `--pod-infra-container-image`). Default `registry.k8s.io/pause:3.10`.
    pub pod_infra_image: String,
    /// Command of the sandbox container; empty runs the image's default entrypoint.
    /// Default empty (e.g. `["sleep", "2147483647"]` for a busybox image).
    pub pod_infra_command: Vec<String>,
    /// How often edged's pod lifecycle event generator relists containers (kubelet PLEG
    /// relist period); Docker events trigger extra relists. Default `2s`.
    #[serde(with = "humantime_serde")]
    pub pleg_relist_period: Duration,
    /// First crash-loop back-off delay before restarting a failed container; doubles per
    /// restart (kubelet: 10s). Default `10s`.
    #[serde(with = "humantime_serde")]
    pub crash_loop_backoff_initial: Duration,
    /// Largest crash-loop (and image pull) back-off delay (kubelet
    /// `crashLoopBackOff.maxContainerRestartPeriod`: 300s). Default `5m`.
    #[serde(with = "humantime_serde")]
    pub crash_loop_backoff_max: Duration,
    /// Container and image garbage collection (kubelet container GC policy and image GC
    /// thresholds). Default: see [`GcConfig`].
    pub gc: GcConfig,
    /// The upstream outbox's bounds and retry policy (`max_entries`, `max_inflight`,
    /// `max_attempts`, ...). Default: see [`OutboxConfig`].
    pub outbox: OutboxConfig,
    /// How long the modules get to stop after SIGINT/SIGTERM before the process exits
    /// anyway (pods keep running either way). Default `10s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_name: default_node_name(),
            cloudhub: "http://127.0.0.1:10000".to_owned(),
            cloudhub_alternates: Vec::new(),
            token: String::new(),
            data_dir: PathBuf::from("/var/lib/verge/edgecore"),
            node_ip: None,
            log_format: LogFormat::Text,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            max_pods: 110,
            system_reserved: ReservedConfig::default(),
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_renew_interval: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            reconnect_initial_backoff: Duration::from_secs(1),
            reconnect_max_backoff: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            upstream_queue: 1024,
            downstream_queue: 1024,
            docker_endpoint: None,
            pod_infra_image: "registry.k8s.io/pause:3.10".to_owned(),
            pod_infra_command: Vec::new(),
            pleg_relist_period: Duration::from_secs(2),
            crash_loop_backoff_initial: Duration::from_secs(10),
            crash_loop_backoff_max: Duration::from_secs(300),
            gc: GcConfig::default(),
            outbox: OutboxConfig::default(),
            shutdown_grace: Duration::from_secs(10),
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

pub use verge_telemetry::LogFormat;

/// One node taint (`v1.Taint` without `timeAdded`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaintConfig {
    /// Taint key. Required.
    pub key: String,
    /// Taint value. Default empty.
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`. Required.
    pub effect: String,
}

/// Resources reserved for the system, as Kubernetes quantities (`"500m"`, `"1Gi"`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ReservedConfig {
    /// CPU, e.g. `"500m"`. Default none.
    pub cpu: Option<String>,
    /// Memory, e.g. `"512Mi"`. Default none.
    pub memory: Option<String>,
    /// Ephemeral storage, e.g. `"1Gi"`. Default none.
    #[serde(rename = "ephemeral-storage")]
    pub ephemeral_storage: Option<String>,
}

/// [`ReservedConfig`] parsed: CPU in millicores, memory and storage in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Reserved CPU, millicores.
    pub cpu_millis: u64,
    /// Reserved memory, bytes.
    pub memory_bytes: u64,
    /// Reserved ephemeral storage, bytes.
    pub ephemeral_storage_bytes: u64,
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

    /// Checks values that serde cannot: non-empty names, positive intervals, parsable quantities.
    ///
    /// # Errors
    /// [`Error::ConfigValue`] naming the first bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: &str| {
            Err(Error::ConfigValue {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.node_name.is_empty() || self.node_name.contains('/') {
            return bad("node_name", "must be a non-empty DNS-1123 subdomain");
        }
        for (field, d) in [
            (
                "node_status_update_frequency",
                self.node_status_update_frequency,
            ),
            ("node_lease_renew_interval", self.node_lease_renew_interval),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("connect_timeout", self.connect_timeout),
            ("pleg_relist_period", self.pleg_relist_period),
            (
                "crash_loop_backoff_initial",
                self.crash_loop_backoff_initial,
            ),
        ] {
            if d.is_zero() {
                return bad(field, "must be greater than zero");
            }
        }
        if self.reconnect_max_backoff < self.reconnect_initial_backoff {
            return bad(
                "reconnect_max_backoff",
                "must be at least reconnect_initial_backoff",
            );
        }
        if self.crash_loop_backoff_max < self.crash_loop_backoff_initial {
            return bad(
                "crash_loop_backoff_max",
                "must be at least crash_loop_backoff_initial",
            );
        }
        if let Err((field, reason)) = self.outbox.validate() {
            return bad(field, reason);
        }
        if let Err(reason) = self.gc.validate() {
            return Err(Error::ConfigValue {
                field: "gc",
                reason,
            });
        }
        if self.pod_infra_image.is_empty() {
            return bad("pod_infra_image", "must name an image");
        }
        if self.node_lease_duration_seconds <= 0 {
            return bad("node_lease_duration_seconds", "must be positive");
        }
        if self.upstream_queue == 0 {
            return bad("upstream_queue", "must hold at least one message");
        }
        if self.downstream_queue == 0 {
            return bad("downstream_queue", "must hold at least one message");
        }
        for t in &self.taints {
            if !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            ) {
                return bad(
                    "taints",
                    "effect must be NoSchedule, PreferNoSchedule or NoExecute",
                );
            }
        }
        self.reserved().map(|_| ())
    }

    /// The parsed [`ReservedConfig`].
    ///
    /// # Errors
    /// [`Error::ConfigValue`] naming the field whose quantity does not parse.
    pub fn reserved(&self) -> Result<Reserved> {
        let r = &self.system_reserved;
        let parse = |field: &'static str, v: &Option<String>, scale: u32| match v {
            None => Ok(0),
            Some(s) => quantity::parse_scaled(s, scale).ok_or_else(|| Error::ConfigValue {
                field,
                reason: format!("bad quantity {s:?}"),
            }),
        };
        Ok(Reserved {
            cpu_millis: parse("system_reserved.cpu", &r.cpu, 3)?,
            memory_bytes: parse("system_reserved.memory", &r.memory, 0)?,
            ephemeral_storage_bytes: parse(
                "system_reserved.ephemeral-storage",
                &r.ephemeral_storage,
                0,
            )?,
        })
    }

    /// The redb file: `<data_dir>/edgecore.redb`.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("edgecore.redb")
    }

    /// Where pod directories (volumes) live: `<data_dir>/pods`, one `<pod uid>/` each.
    pub fn pods_dir(&self) -> PathBuf {
        self.data_dir.join("pods")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::from_yaml("", "t.yaml").expect("defaults");
        assert_eq!(c.cloudhub, "http://127.0.0.1:10000");
        assert!(c.cloudhub_alternates.is_empty());
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(c.node_lease_duration_seconds, 40);
    }

    #[test]
    fn fields_parse() {
        let yaml = "nodeName: x\n";
        let err = Config::from_yaml(yaml, "edgecore.yaml").expect_err("camelCase is unknown");
        assert!(err.to_string().contains("nodeName"), "{err}");
        let yaml = "node_name: edge-1\nnode_status_update_frequency: 200ms\n\
                    cloudhub_alternates: [http://hub-2:10000]\n\
                    taints: [{key: k, effect: NoSchedule}]\n\
                    system_reserved: {cpu: 500m, memory: 1Gi}\nnode_ip: 10.0.0.5\n";
        let c = Config::from_yaml(yaml, "edgecore.yaml").expect("valid");
        assert_eq!(c.node_name, "edge-1");
        assert_eq!(c.cloudhub_alternates, ["http://hub-2:10000"]);
        assert_eq!(c.node_status_update_frequency, Duration::from_millis(200));
        assert_eq!(c.taints[0].value, "");
        let r = c.reserved().expect("quantities");
        assert_eq!((r.cpu_millis, r.memory_bytes), (500, 1 << 30));
    }

    #[test]
    fn unknown_field_is_rejected_by_name() {
        let err = Config::from_yaml("node_nmae: x\n", "edgecore.yaml").expect_err("unknown");
        let msg = err.to_string();
        assert!(
            msg.contains("node_nmae") && msg.contains("edgecore.yaml"),
            "{msg}"
        );
        let err = Config::from_yaml("system_reserved: {gpu: 1}\n", "e.yaml").expect_err("unknown");
        assert!(err.to_string().contains("gpu"), "{err}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let err = Config::from_yaml("system_reserved: {cpu: lots}\n", "e.yaml").expect_err("bad");
        assert!(err.to_string().contains("system_reserved.cpu"), "{err}");
        let err = Config::from_yaml("taints: [{key: k, effect: Never}]\n", "e").expect_err("bad");
        assert!(err.to_string().contains("taints"), "{err}");
        let err = Config::from_yaml("outbox: {max_inflight: 0}\n", "e").expect_err("bad");
        assert!(err.to_string().contains("outbox.max_inflight"), "{err}");
    }
}
