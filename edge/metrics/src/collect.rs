//! One collection round over the node's running containers ([`Collector::snapshot`]): the
//! containers edged made (listed once per round from the container runtime, by the labels
//! edged puts on them), each read from its cgroup, found through its main process
//! (`/proc/<pid>/cgroup`), and each pod's network from its sandbox's process (or, for a
//! pod without a sandbox, its container's). A container's
//! process id, start time and cgroup never change while it runs, so each is asked of the
//! runtime once (two inspects) and kept until the container is gone: a round costs one
//! runtime call plus file reads.
//!
//! A pod's CPU and memory are the sums of its containers' and its sandbox's (the kubelet
//! reads the pod's cgroup, which holds the same processes).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::Mutex;
use tracing::debug;
use verge_container_runtime::{ContainerSummary, ListFilter, StreamingRuntime, labels};

use crate::cgroup::{CgroupFs, CgroupPath, CgroupStats};
use crate::rate::CpuRates;
use crate::snapshot::{
    ContainerSample, NodeSample, PodSample, Sample, Snapshot, Timed, VolumeSample,
};
use crate::volumes::VolumeUsage;

/// What is kept of a running container between rounds.
#[derive(Debug, Clone)]
struct Known {
    started: DateTime<Utc>,
    pid: u32,
    cgroup: CgroupPath,
}

#[derive(Debug, Default)]
struct State {
    known: HashMap<String, Known>,
    rates: CpuRates,
    image_fs_root: Option<Option<PathBuf>>,
    volumes: VolumeUsage,
}

/// Reads the node's and its pods' figures; see the module docs. Rounds are serialized (one
/// at a time), so concurrent scrapes see consistent rates.
#[derive(Debug)]
pub struct Collector<R> {
    runtime: R,
    fs: CgroupFs,
    node: String,
    boot_time: DateTime<Utc>,
    pods_dir: Option<PathBuf>,
    state: Mutex<State>,
}

/// One container of this round's list, by the labels edged puts on it.
struct Listed<'a> {
    summary: &'a ContainerSummary,
    namespace: &'a str,
    pod: &'a str,
    uid: &'a str,
    container: &'a str,
}

impl<'a> Listed<'a> {
    fn of(summary: &'a ContainerSummary) -> Option<Self> {
        let label = |key: &str| summary.labels.get(key).map(String::as_str);
        Some(Self {
            summary,
            namespace: label(labels::POD_NAMESPACE)?,
            pod: label(labels::POD_NAME)?,
            uid: label(labels::POD_UID)?,
            container: label(labels::CONTAINER_NAME)?,
        })
    }

    fn is_sandbox(&self) -> bool {
        self.container == labels::SANDBOX_NAME
    }

    /// Whether its process is in the pod's network namespace as its holder: the sandbox, or
    /// the one container of a pod without a sandbox (labelled with its pod IP).
    fn holds_network(&self) -> bool {
        self.is_sandbox() || self.summary.labels.contains_key(labels::POD_IP)
    }
}

impl<R: StreamingRuntime> Collector<R> {
    /// A collector for node `node` over `runtime` (scoped to this node's containers), reading
    /// the kernel's files through `fs`.
    pub fn new(runtime: R, fs: CgroupFs, node: &str) -> Self {
        let boot_time = fs.boot_time().unwrap_or_else(|_| Utc::now());
        Self {
            runtime,
            fs,
            node: node.to_owned(),
            boot_time,
            pods_dir: None,
            state: Mutex::default(),
        }
    }

    /// The same collector, reporting pod volumes (in [`summary`](Self::summary)) from
    /// `<pods_dir>/<pod uid>/volumes/` (edged's `<dataDir>/pods`).
    #[must_use]
    pub fn with_pods_dir(mut self, pods_dir: PathBuf) -> Self {
        self.pods_dir = Some(pods_dir);
        self
    }

    /// [`snapshot`](Self::snapshot) with each pod's volumes ([`crate::volumes`]), for the
    /// Summary API.
    pub async fn summary(&self) -> Snapshot {
        self.collect(true).await
    }

    /// The node's and its running pods' figures now. A figure that cannot be read is left
    /// out and sets [`Snapshot::scrape_error`] (logged at debug level); a runtime that
    /// cannot list its containers gives a snapshot of the node alone, with the error set.
    pub async fn snapshot(&self) -> Snapshot {
        self.collect(false).await
    }

    async fn collect(&self, volumes: bool) -> Snapshot {
        let mut state = self.state.lock().await;
        let mut error = false;
        let listed = match self.runtime.list(&ListFilter::node()).await {
            Ok(listed) => listed,
            Err(e) => {
                debug!(error = %e, "stats: cannot list containers");
                error = true;
                Vec::new()
            }
        };
        let running: Vec<Listed<'_>> = listed
            .iter()
            .filter(|c| c.state == "running")
            .filter_map(Listed::of)
            .collect();
        state
            .known
            .retain(|id, _| running.iter().any(|c| &c.summary.id == id));
        let now = Instant::now();
        let node = self.node_sample(&mut state, now, &mut error).await;
        let mut pods: Vec<PodSample> = Vec::new();
        for c in &running {
            let Some(known) = self.known(&mut state, &c.summary.id, &mut error).await else {
                continue;
            };
            let usage = match self.fs.stats(&known.cgroup) {
                Ok(stats) => Some(sample(&mut state.rates, &c.summary.id, now, &stats)),
                Err(e) => {
                    debug!(error = %e, container = %c.summary.id, "stats: cgroup");
                    error = true;
                    None
                }
            };
            let pod = match pods.iter_mut().find(|p| p.uid == c.uid) {
                Some(pod) => pod,
                None => {
                    pods.push(PodSample {
                        namespace: c.namespace.to_owned(),
                        name: c.pod.to_owned(),
                        uid: c.uid.to_owned(),
                        start_time: known.started,
                        usage: None,
                        network: None,
                        containers: Vec::new(),
                        volumes: Vec::new(),
                        ephemeral_storage: None,
                        process_count: None,
                    });
                    let last = pods.len() - 1;
                    &mut pods[last]
                }
            };
            pod.usage = add(pod.usage, usage);
            if c.holds_network() {
                match self.fs.network(known.pid) {
                    Ok(interfaces) => pod.network = Some(timed(interfaces)),
                    Err(e) => {
                        debug!(error = %e, pod = %c.pod, "stats: pod network");
                        error = true;
                    }
                }
            }
            if c.is_sandbox() {
                pod.start_time = known.started;
            } else {
                pod.containers.push(ContainerSample {
                    name: c.container.to_owned(),
                    start_time: known.started,
                    usage,
                    rootfs: None,
                    logs: None,
                });
            }
        }
        // Pod sums: rates of sums are taken from the summed counter under the pod's uid.
        for pod in &mut pods {
            if let Some(usage) = &mut pod.usage {
                usage.usage_nano_cores = state.rates.observe(&pod.uid, now, usage.cpu_usage_nanos);
            }
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            if volumes && let Some(dir) = &self.pods_dir {
                pod.volumes = state
                    .volumes
                    .pod_volumes(dir, &pod.uid, now)
                    .into_iter()
                    .map(|(name, fs)| VolumeSample {
                        name,
                        fs: timed(fs),
                    })
                    .collect();
            }
        }
        if volumes && let Some(dir) = &self.pods_dir {
            let uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
            state.volumes.retain(dir, &uids);
        }
        let keys = running
            .iter()
            .map(|c| c.summary.id.clone())
            .chain(pods.iter().map(|p| p.uid.clone()))
            .chain(std::iter::once(NODE_KEY.to_owned()));
        state.rates.retain(keys.collect::<Vec<_>>());
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Snapshot {
            node,
            pods,
            scrape_error: error,
        }
    }

    /// The node's figures: CPU and memory, interfaces, the root and image filesystems.
    async fn node_sample(&self, state: &mut State, now: Instant, error: &mut bool) -> NodeSample {
        let usage = match self.fs.node_stats() {
            Ok(stats) => {
                let rate = state.rates.observe(NODE_KEY, now, stats.cpu_usage_nanos);
                Some(Sample::from_node(Utc::now(), &stats, rate))
            }
            Err(e) => {
                debug!(error = %e, "stats: node");
                *error = true;
                None
            }
        };
        if state.image_fs_root.is_none() {
            state.image_fs_root = Some(self.runtime.image_fs_root().await.ok().flatten());
        }
        let image_fs = state
            .image_fs_root
            .clone()
            .flatten()
            .and_then(|root| crate::fs::filesystem(&root).ok())
            .map(timed);
        NodeSample {
            name: self.node.clone(),
            start_time: self.boot_time,
            usage,
            network: self.fs.host_network().ok().map(timed),
            fs: crate::fs::filesystem(std::path::Path::new("/"))
                .ok()
                .map(timed),
            image_fs,
            system_containers: Vec::new(),
        }
    }

    /// What is kept of running container `id`, asked of the runtime the first time.
    async fn known(&self, state: &mut State, id: &str, error: &mut bool) -> Option<Known> {
        if let Some(known) = state.known.get(id) {
            return Some(known.clone());
        }
        let found = async {
            let info = self.runtime.inspect(id).await.ok()??;
            let pid = self.runtime.process_id(id).await.ok()??;
            let started = info
                .started_at
                .and_then(|t| {
                    let nanos = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
                    DateTime::<Utc>::from_timestamp(t.0.as_second(), nanos)
                })
                .unwrap_or_else(Utc::now);
            Some((started, pid))
        }
        .await;
        let Some((started, pid)) = found else {
            // Gone between the list and the inspect: not an error.
            return None;
        };
        match self.fs.process_cgroup(pid) {
            Ok(cgroup) => {
                let known = Known {
                    started,
                    pid,
                    cgroup,
                };
                state.known.insert(id.to_owned(), known.clone());
                Some(known)
            }
            Err(e) => {
                debug!(error = %e, container = id, "stats: process cgroup");
                *error = true;
                None
            }
        }
    }
}

/// The rate key of the node's own counter.
const NODE_KEY: &str = "node";

/// `stats` read now, with its rate since the previous round under `key`.
fn sample(rates: &mut CpuRates, key: &str, now: Instant, stats: &CgroupStats) -> Sample {
    let rate = rates.observe(key, now, stats.cpu_usage_nanos);
    Sample::from_cgroup(Utc::now(), stats, rate)
}

/// A value read now.
fn timed<T>(value: T) -> Timed<T> {
    Timed {
        time: Utc::now(),
        value,
    }
}

/// The sum of two cgroups' figures (a pod's containers), the later timestamp kept.
fn add(total: Option<Sample>, part: Option<Sample>) -> Option<Sample> {
    match (total, part) {
        (None, part) => part.map(|p| Sample {
            usage_nano_cores: None,
            ..p
        }),
        (total, None) => total,
        (Some(t), Some(p)) => {
            let (m, n) = (t.memory, p.memory);
            Some(Sample {
                timestamp: t.timestamp.max(p.timestamp),
                cpu_usage_nanos: t.cpu_usage_nanos.saturating_add(p.cpu_usage_nanos),
                usage_nano_cores: None,
                memory: crate::cgroup::MemoryStats {
                    usage_bytes: m.usage_bytes.saturating_add(n.usage_bytes),
                    working_set_bytes: m.working_set_bytes.saturating_add(n.working_set_bytes),
                    rss_bytes: m.rss_bytes.saturating_add(n.rss_bytes),
                    page_faults: m.page_faults.saturating_add(n.page_faults),
                    major_page_faults: m.major_page_faults.saturating_add(n.major_page_faults),
                },
                memory_available_bytes: None,
            })
        }
    }
}

#[cfg(test)]
mod tests;
