//! The kubelet's Summary API (`/stats/summary`, `stats/v1alpha1`): serde types with the
//! kubelet's JSON names, and building them from a [`Snapshot`].
//!
//! Left out, as a kubelet without those features reports them: `io`, `psi`, `swap`,
//! `rlimit`, `accelerators` and `userDefinedMetrics`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fs;
use crate::net;
use crate::snapshot::{ContainerSample, PodSample, Sample, Snapshot, Timed, VolumeSample};

/// The name of the interface whose counters the kubelet also puts in `network` itself.
pub const DEFAULT_INTERFACE: &str = "eth0";

/// An instant in JSON as `metav1.Time` writes it: RFC 3339 in UTC to the second
/// (`2024-05-01T10:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub DateTime<Utc>);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| Time(t.with_timezone(&Utc)))
            .map_err(serde::de::Error::custom)
    }
}

/// `/stats/summary`: the node and its pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// The pods.
    pub pods: Vec<PodStats>,
}

/// `node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// `nodeName`.
    pub node_name: String,
    /// `systemContainers`, omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// `startTime`.
    pub start_time: Time,
    /// `cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// `fs`: the node's root filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// `runtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
}

/// `runtime`: the container engine's filesystems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// `imageFs`: where images are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// `containerFs`: where writable layers are (the image filesystem unless split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// `pods[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// `podRef`.
    pub pod_ref: PodReference,
    /// `startTime`.
    pub start_time: Time,
    /// `containers` (always present).
    pub containers: Vec<ContainerStats>,
    /// `cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// `volume`, omitted when empty.
    #[serde(rename = "volume", default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeStats>,
    /// `ephemeral-storage`.
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    /// `process_stats`.
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

/// `podRef`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    /// `name`.
    pub name: String,
    /// `namespace`.
    pub namespace: String,
    /// `uid`.
    pub uid: String,
}

/// `process_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// `process_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// `containers[]` and `systemContainers[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// `name`.
    pub name: String,
    /// `startTime`.
    pub start_time: Time,
    /// `cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// `rootfs`: the writable layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// `logs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// `cpu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// `time`: when read.
    pub time: Time,
    /// `usageNanoCores`: usage over the last interval, in nanocores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// `usageCoreNanoSeconds`: cumulative CPU time in core-nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// `memory`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// `time`: when read.
    pub time: Time,
    /// `availableBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// `usageBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// `workingSetBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// `rssBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// `pageFaults`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// `majorPageFaults`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// `network`: the default interface's counters flattened in, and every interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// `time`: when read.
    pub time: Time,
    /// The [`DEFAULT_INTERFACE`]'s counters (`name` empty when there is none), flattened.
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// `interfaces`, omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// `interfaces[]`: cumulative counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// `name`.
    pub name: String,
    /// `rxBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// `rxErrors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// `txBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// `txErrors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// `fs`, `rootfs`, `logs`, `imageFs`, `ephemeral-storage`: bytes and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// `time`: when read.
    pub time: Time,
    /// `availableBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// `capacityBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// `usedBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// `inodesFree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// `inodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// `inodesUsed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// `volume[]`: a volume's filesystem figures flattened in, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// The filesystem figures, flattened.
    #[serde(flatten)]
    pub fs: FsStats,
    /// `name`, omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `pvcRef`: the claim, for a PersistentVolumeClaim volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

/// `pvcRef`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PvcReference {
    /// `name`.
    pub name: String,
    /// `namespace`.
    pub namespace: String,
}

impl Summary {
    /// The Summary of `snapshot`: every figure it has, nothing invented (a pod without a
    /// pod-level [`Sample`] has no `cpu` and `memory`). Network `interfaces` come in the
    /// snapshot's order, with [`DEFAULT_INTERFACE`] also flattened into `network`, and
    /// `runtime.containerFs` is `imageFs`, as a kubelet whose image filesystem is not split.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let node = &snapshot.node;
        let image_fs = node.image_fs.as_ref().map(fs_stats);
        Self {
            node: NodeStats {
                node_name: node.name.clone(),
                system_containers: node.system_containers.iter().map(container).collect(),
                start_time: Time(node.start_time),
                cpu: node.usage.as_ref().map(cpu),
                memory: node.usage.as_ref().map(memory),
                network: node.network.as_ref().map(network),
                fs: node.fs.as_ref().map(fs_stats),
                runtime: image_fs.map(|fs| RuntimeStats {
                    image_fs: Some(fs),
                    container_fs: Some(fs),
                }),
            },
            pods: snapshot.pods.iter().map(pod).collect(),
        }
    }
}

fn pod(pod: &PodSample) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            uid: pod.uid.clone(),
        },
        start_time: Time(pod.start_time),
        containers: pod.containers.iter().map(container).collect(),
        cpu: pod.usage.as_ref().map(cpu),
        memory: pod.usage.as_ref().map(memory),
        network: pod.network.as_ref().map(network),
        volumes: pod.volumes.iter().map(volume).collect(),
        ephemeral_storage: pod.ephemeral_storage.as_ref().map(fs_stats),
        process_stats: pod.process_count.map(|n| ProcessStats {
            process_count: Some(n),
        }),
    }
}

fn container(c: &ContainerSample) -> ContainerStats {
    ContainerStats {
        name: c.name.clone(),
        start_time: Time(c.start_time),
        cpu: c.usage.as_ref().map(cpu),
        memory: c.usage.as_ref().map(memory),
        rootfs: c.rootfs.as_ref().map(fs_stats),
        logs: c.logs.as_ref().map(fs_stats),
    }
}

fn cpu(s: &Sample) -> CpuStats {
    CpuStats {
        time: Time(s.timestamp),
        usage_nano_cores: s.usage_nano_cores,
        usage_core_nano_seconds: Some(s.cpu_usage_nanos),
    }
}

fn memory(s: &Sample) -> MemoryStats {
    MemoryStats {
        time: Time(s.timestamp),
        available_bytes: s.memory_available_bytes,
        usage_bytes: Some(s.memory.usage_bytes),
        working_set_bytes: Some(s.memory.working_set_bytes),
        rss_bytes: Some(s.memory.rss_bytes),
        page_faults: Some(s.memory.page_faults),
        major_page_faults: Some(s.memory.major_page_faults),
    }
}

fn network(n: &Timed<Vec<net::InterfaceStats>>) -> NetworkStats {
    let interfaces = n.value.iter().map(interface).collect::<Vec<_>>();
    let default = interfaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .cloned();
    NetworkStats {
        time: Time(n.time),
        default: default.unwrap_or_default(),
        interfaces,
    }
}

fn interface(i: &net::InterfaceStats) -> InterfaceStats {
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    }
}

fn fs_stats(f: &Timed<fs::FsStats>) -> FsStats {
    let v = &f.value;
    FsStats {
        time: Time(f.time),
        available_bytes: Some(v.available_bytes),
        capacity_bytes: Some(v.capacity_bytes),
        used_bytes: Some(v.used_bytes),
        inodes_free: Some(v.inodes_free),
        inodes: Some(v.inodes),
        inodes_used: Some(v.inodes_used),
    }
}

fn volume(v: &VolumeSample) -> VolumeStats {
    VolumeStats {
        fs: fs_stats(&v.fs),
        name: v.name.clone(),
        pvc_ref: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
