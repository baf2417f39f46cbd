//! [`EdgedConfig`]: the `edged:` section of edgecore's configuration file, named after the
//! kubelet's `KubeletConfiguration` fields (and its flags where the setting is only a flag)
//! wherever a kubelet concept exists; [`EdgedSettings`]: what edged and the node agent read of
//! the whole file.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::gc::GcConfig;
use crate::quantity;
use crate::{Error, Result};

/// What edged and the node agent read of edgecore's configuration: the node's name, the
/// data directory and the `edged:` section, and the port the streaming server is advertised
/// on. edgecore builds it from its configuration file, as it builds edgehub's
/// `HubSettings`.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgedSettings {
    /// The Kubernetes node name (top-level `nodeName`).
    pub node_name: String,
    /// edgecore's data directory (top-level `dataDir`): pod directories live in its `pods`
    /// subdirectory, and its filesystem is reported as `ephemeral-storage`.
    pub data_dir: PathBuf,
    /// The `edged:` section.
    pub edged: EdgedConfig,
    /// The port advertised as the node's `daemonEndpoints.kubeletEndpoint.port` (the
    /// streaming server's `streaming.port`, the kubelet's 10250 by default).
    pub streaming_port: u16,
    /// The cluster domain of pods' resolv.conf search list and FQDNs (the kubelet's
    /// `clusterDomain`; edgecore's `network.clusterDomain`).
    pub cluster_domain: String,
}

impl EdgedSettings {
    /// Settings for node `node_name` with data in `data_dir`, the `edged:` section's
    /// defaults, the kubelet's streaming port 10250 and the cluster domain `cluster.local`.
    pub fn new(node_name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            node_name: node_name.into(),
            data_dir: data_dir.into(),
            edged: EdgedConfig::default(),
            streaming_port: 10250,
            cluster_domain: crate::etc_hosts::DEFAULT_CLUSTER_DOMAIN.to_owned(),
        }
    }

    /// Where pod directories (volumes) live: `<dataDir>/pods`, one `<pod uid>/` each.
    pub fn pods_dir(&self) -> PathBuf {
        self.data_dir.join("pods")
    }

    /// The parsed `edged.systemReserved`.
    ///
    /// # Errors
    /// [`Error::ConfigValue`] naming the field whose quantity does not parse.
    pub fn reserved(&self) -> Result<Reserved> {
        self.edged
            .reserved()
            .map_err(|(field, reason)| Error::ConfigValue { field, reason })
    }
}

/// The node and pod settings of edged (YAML `edged:`); every field optional.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EdgedConfig {
    /// The node's InternalIP (kubelet `--node-ip`). Default: the first non-loopback IPv4 of
    /// the host (flag `--node-ip`).
    #[serde(rename = "nodeIP")]
    pub node_ip: Option<IpAddr>,
    /// Extra node labels, merged over the built-in ones (kubelet `--node-labels`).
    /// Default none.
    pub node_labels: BTreeMap<String, String>,
    /// Taints the node registers with (kubelet `registerWithTaints`): sent with the join, and
    /// cloudhub creates the Node with them (like the kubelet's, they apply when the Node is
    /// created). Default none.
    pub register_with_taints: Vec<TaintConfig>,
    /// `pods` capacity (kubelet `maxPods`). Default 110.
    pub max_pods: u32,
    /// Resources held back from pods (kubelet `systemReserved`); allocatable = capacity minus
    /// these. Default none.
    pub system_reserved: ReservedConfig,
    /// How often the node status is computed (kubelet `nodeStatusUpdateFrequency`); it is
    /// sent only when it changed, or when `nodeStatusReportFrequency` has passed (the
    /// kubelet's behaviour with node leases). Default `10s`.
    #[serde(with = "humantime_serde")]
    pub node_status_update_frequency: Duration,
    /// How long an unchanged node status goes unsent (kubelet `nodeStatusReportFrequency`):
    /// a status that differs from the last one sent in this session in anything but the
    /// conditions' `lastHeartbeatTime` is sent at its next computation, an unchanged one
    /// only once this long has passed since the last send. Default `5m` (the kubelet's;
    /// unlike the kubelet, setting `nodeStatusUpdateFrequency` does not change it).
    #[serde(with = "humantime_serde")]
    pub node_status_report_frequency: Duration,
    /// `spec.leaseDurationSeconds` of the node Lease (kubelet `nodeLeaseDurationSeconds`).
    /// The edge sends its Lease once per session; edgecontroller renews it every quarter of
    /// this while the session lasts (the kubelet's renew interval). Default 40.
    pub node_lease_duration_seconds: i32,
    /// The Docker engine edged drives, e.g. `unix:///run/docker.sock` or `tcp://host:2375`
    /// (kubelet `containerRuntimeEndpoint`). Default none: the local socket
    /// (`unix:///var/run/docker.sock`, or `DOCKER_HOST`).
    pub container_runtime_endpoint: Option<String>,
    /// Image of the pod sandbox ("pause") container that holds each pod's network namespace
    /// (KubeEdge edged `podSandboxImage`, kubelet `--pod-infra-container-image`). Default
    /// `registry.k8s.io/pause:3.10`.
    pub pod_sandbox_image: String,
    /// Command of the sandbox container; empty runs the image's default entrypoint.
    /// Default empty (e.g. `["sleep", "2147483647"]` for a busybox image).
    pub pod_sandbox_command: Vec<String>,
    /// How often the pod lifecycle event generator relists containers (kubelet PLEG relist
    /// period); Docker events trigger extra relists. Default `2s`.
    #[serde(with = "humantime_serde")]
    pub pleg_relist_period: Duration,
    /// Crash-loop back-off of failed containers (kubelet `crashLoopBackOff`).
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    /// Container and image garbage collection (kubelet container GC policy and image GC
    /// thresholds). Default: see [`GcConfig`].
    pub gc: GcConfig,
}

impl Default for EdgedConfig {
    fn default() -> Self {
        Self {
            node_ip: None,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            max_pods: 110,
            system_reserved: ReservedConfig::default(),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            container_runtime_endpoint: None,
            pod_sandbox_image: "registry.k8s.io/pause:3.10".to_owned(),
            pod_sandbox_command: Vec::new(),
            pleg_relist_period: Duration::from_secs(2),
            crash_loop_back_off: CrashLoopBackOffConfig::default(),
            gc: GcConfig::default(),
        }
    }
}

/// The crash-loop back-off (YAML `edged.crashLoopBackOff:`): the delay before restarting a
/// failed container starts at `initialDelay` and doubles per restart up to
/// `maxContainerRestartPeriod` (kubelet: 10s and 300s).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct CrashLoopBackOffConfig {
    /// First delay. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub initial_delay: Duration,
    /// Largest delay, also of image pull back-off (kubelet
    /// `crashLoopBackOff.maxContainerRestartPeriod`). Default `5m`.
    #[serde(with = "humantime_serde")]
    pub max_container_restart_period: Duration,
}

impl Default for CrashLoopBackOffConfig {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_secs(10),
            max_container_restart_period: Duration::from_secs(300),
        }
    }
}

/// One node taint (`v1.Taint` without `timeAdded`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
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
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ReservedConfig {
    /// CPU, e.g. `"500m"`. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory, e.g. `"512Mi"`. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Ephemeral storage, e.g. `"1Gi"`. Default none.
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
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

impl EdgedConfig {
    /// Checks values that serde cannot: positive intervals, parsable quantities, known taint
    /// effects.
    ///
    /// # Errors
    /// The first bad field (its full YAML path) and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let bad = |field, reason: &str| Err((field, reason.to_owned()));
        let backoff = &self.crash_loop_back_off;
        for (field, d) in [
            (
                "edged.nodeStatusUpdateFrequency",
                self.node_status_update_frequency,
            ),
            (
                "edged.nodeStatusReportFrequency",
                self.node_status_report_frequency,
            ),
            ("edged.plegRelistPeriod", self.pleg_relist_period),
            ("edged.crashLoopBackOff.initialDelay", backoff.initial_delay),
        ] {
            if d.is_zero() {
                return bad(field, "must be greater than zero");
            }
        }
        if backoff.max_container_restart_period < backoff.initial_delay {
            return bad(
                "edged.crashLoopBackOff.maxContainerRestartPeriod",
                "must be at least initialDelay",
            );
        }
        if let Err(reason) = self.gc.validate() {
            return Err(("edged.gc", reason));
        }
        if self.pod_sandbox_image.is_empty() {
            return bad("edged.podSandboxImage", "must name an image");
        }
        if self.node_lease_duration_seconds <= 0 {
            return bad("edged.nodeLeaseDurationSeconds", "must be positive");
        }
        if self.register_with_taints.iter().any(|t| {
            !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            )
        }) {
            return bad(
                "edged.registerWithTaints",
                "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            );
        }
        self.reserved().map(|_| ())
    }

    /// The parsed [`ReservedConfig`].
    ///
    /// # Errors
    /// The field whose quantity does not parse, and the quantity.
    pub fn reserved(&self) -> Result<Reserved, (&'static str, String)> {
        let r = &self.system_reserved;
        let parse = |field: &'static str, v: &Option<String>, scale: u32| match v {
            None => Ok(0),
            Some(s) => quantity::parse_scaled(s, scale)
                .ok_or_else(|| (field, format!("bad quantity {s:?}"))),
        };
        Ok(Reserved {
            cpu_millis: parse("edged.systemReserved.cpu", &r.cpu, 3)?,
            memory_bytes: parse("edged.systemReserved.memory", &r.memory, 0)?,
            ephemeral_storage_bytes: parse(
                "edged.systemReserved.ephemeral-storage",
                &r.ephemeral_storage,
                0,
            )?,
        })
    }
}
