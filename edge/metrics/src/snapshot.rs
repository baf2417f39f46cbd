//! One collection round's figures: the input of both renderers,
//! [`crate::resource::render`] (`/metrics/resource`) and [`crate::Summary::from_snapshot`]
//! (`/stats/summary`), so both report the same readings.

use chrono::{DateTime, Utc};

use crate::cgroup::{CgroupStats, MemoryStats};
use crate::fs::FsStats;
use crate::net::InterfaceStats;
use crate::node::NodeStats;

/// The node, its pods and whether any reading failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The node's figures.
    pub node: NodeSample,
    /// The pods running on the node.
    pub pods: Vec<PodSample>,
    /// Some reading of this round failed: `/metrics/resource` reports
    /// `resource_scrape_error 1` (the figures read are still reported).
    pub scrape_error: bool,
}

/// A value with the instant it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed<T> {
    /// When it was read.
    pub time: DateTime<Utc>,
    /// What was read.
    pub value: T,
}

/// The CPU and memory figures of one cgroup (or the node) at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When they were read: the timestamp of the `/metrics/resource` samples and the `time`
    /// of the Summary's `cpu` and `memory`.
    pub timestamp: DateTime<Utc>,
    /// Cumulative CPU time in nanoseconds (Summary `usageCoreNanoSeconds`).
    pub cpu_usage_nanos: u64,
    /// CPU usage since the previous round in nanocores (Summary `usageNanoCores`), from
    /// [`crate::CpuRates`]; `None` on the first round.
    pub usage_nano_cores: Option<u64>,
    /// Memory figures.
    pub memory: MemoryStats,
    /// Summary `memory.availableBytes`: for the node, capacity − working set
    /// ([`NodeStats::kubelet_available_bytes`]); for a container, its limit − working set
    /// when it has a limit.
    pub memory_available_bytes: Option<u64>,
}

impl Sample {
    /// A cgroup's figures read at `timestamp` (no `availableBytes`).
    pub fn from_cgroup(
        timestamp: DateTime<Utc>,
        stats: &CgroupStats,
        usage_nano_cores: Option<u64>,
    ) -> Self {
        Self {
            timestamp,
            cpu_usage_nanos: stats.cpu_usage_nanos,
            usage_nano_cores,
            memory: stats.memory,
            memory_available_bytes: None,
        }
    }

    /// The node's figures read at `timestamp`, `availableBytes` as the kubelet's.
    pub fn from_node(
        timestamp: DateTime<Utc>,
        stats: &NodeStats,
        usage_nano_cores: Option<u64>,
    ) -> Self {
        Self {
            timestamp,
            cpu_usage_nanos: stats.cpu_usage_nanos,
            usage_nano_cores,
            memory: stats.memory,
            memory_available_bytes: Some(stats.kubelet_available_bytes()),
        }
    }
}

/// The node's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSample {
    /// The Node's name (Summary `node.nodeName`).
    pub name: String,
    /// When the node (edgecore's view of it: boot time or edgecore's start) started.
    pub start_time: DateTime<Utc>,
    /// CPU and memory; `None` when they could not be read.
    pub usage: Option<Sample>,
    /// The node's interfaces ([`crate::CgroupFs::host_network`]).
    pub network: Option<Timed<Vec<InterfaceStats>>>,
    /// The filesystem of the node's root (Summary `node.fs`).
    pub fs: Option<Timed<FsStats>>,
    /// The filesystem holding the container engine's images (Summary `runtime.imageFs`).
    pub image_fs: Option<Timed<FsStats>>,
    /// System containers (Summary `systemContainers`, e.g. `kubelet`, `runtime`).
    pub system_containers: Vec<ContainerSample>,
}

/// A pod's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSample {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// When the pod started (its sandbox's creation).
    pub start_time: DateTime<Utc>,
    /// The pod cgroup's CPU and memory; `None` when not read (the renderers then report no
    /// pod-level CPU and memory).
    pub usage: Option<Sample>,
    /// The pod's interfaces ([`crate::CgroupFs::network`] of its sandbox).
    pub network: Option<Timed<Vec<InterfaceStats>>>,
    /// The pod's containers.
    pub containers: Vec<ContainerSample>,
    /// The pod's volumes.
    pub volumes: Vec<VolumeSample>,
    /// The pod's ephemeral storage (Summary `ephemeral-storage`).
    pub ephemeral_storage: Option<Timed<FsStats>>,
    /// The number of processes in the pod (Summary `process_stats.process_count`).
    pub process_count: Option<u64>,
}

/// A container's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSample {
    /// The container's name in the pod spec.
    pub name: String,
    /// When the container started; `container_start_time_seconds` is reported only when it
    /// is after the Unix epoch, as the kubelet does.
    pub start_time: DateTime<Utc>,
    /// The container cgroup's CPU and memory; `None` when not read.
    pub usage: Option<Sample>,
    /// The container's writable layer (Summary `rootfs`).
    pub rootfs: Option<Timed<FsStats>>,
    /// The container's logs (Summary `logs`).
    pub logs: Option<Timed<FsStats>>,
}

/// A pod volume's filesystem figures.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSample {
    /// The volume's name in the pod spec.
    pub name: String,
    /// Its filesystem figures.
    pub fs: Timed<FsStats>,
}
