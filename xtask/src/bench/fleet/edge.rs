//! Hollow edges that speak the whole protocol an idle edgecore speaks, as KubeEdge's edgemark
//! hollow nodes do for CloudCore, so that what a fleet costs the cloud is measured and not
//! guessed: one `EdgeHub.Connect` stream per node over its own mutual-TLS connection to one
//! cloudhub replica (another on failure, as `edgeHub.serverAlternates`), and per session:
//!
//! * the hello with the inventory of what it holds (resync by inventory);
//! * its registration (`insert _/node/<node>`), its Lease (`update kube-node-lease/lease/…`,
//!   which hands the renewals to edgecontroller's renewer) and its full node status, as
//!   edgecore's node module at every session start (`edge/edged/src/node/mod.rs`);
//! * its node status again only when it changes (an idle node's does not) plus every
//!   `nodeStatusReportFrequency`, with only the conditions' heartbeats (`report::heartbeat`);
//! * a keepalive every interval the welcome gives; an ack for every object message and
//!   `resync` marker;
//! * for each pod bound to it, the status of a running pod once per pod uid (`update
//!   <ns>/podstatus/<name>` with the pod's uid), and for a pod being deleted, the deletion
//!   (`delete <ns>/pod/<name>`), as edged does once it stopped it.
//!
//! Answers to its own reports are counted (`ack`, `error`); nothing is resent, where
//! edgecore's outbox resends after 30 s: an error is a failure of the run.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rustls::ClientConfig;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tonic::transport::Endpoint;
use verge_core::{
    Envelope, Group, Kind, Module, ObjectVersion, Outcome, ResourceKey, ResourceType, Write,
};
use verge_proto::Message;
use verge_proto::hub::EdgeHello;

use crate::bench::scale::wire::{self, Bytes};

/// Where the benchmark wants every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Connected in session `epoch` (a new epoch is a new session).
    Connected(u64),
    /// Tasks end.
    Stop,
}

/// What a node reports to the benchmark.
#[derive(Debug)]
pub(super) enum Event {
    /// Node `index` received the `resync` marker of a session, on replica `replica`.
    Resynced {
        /// The node.
        index: usize,
        /// The replica it is connected to.
        replica: usize,
        /// When.
        at: Instant,
    },
    /// A pod named `probe-*` arrived (name, when).
    Probe(String, Instant),
}

/// How the hollow edges reach the cloud and behave.
#[derive(Debug)]
pub(super) struct Shared {
    /// cloudhub's replicas' edge endpoints; node `i` starts with replica `i % len`.
    pub endpoints: Vec<Endpoint>,
    /// Bytes on all the TCP streams.
    pub bytes: Arc<Bytes>,
    /// edgecore's `nodeStatusUpdateFrequency`: how often a node looks at its status.
    pub status_tick: Duration,
    /// edgecore's `nodeStatusReportFrequency`, milliseconds: how often an unchanged status
    /// is reported (changed by the benchmark between measurements).
    pub status_period_ms: AtomicU64,
    /// Whether a new connection may resume an earlier TLS session (edgecore keeps its TLS
    /// configuration, and with it the session store, across reconnects); `false` makes
    /// every connection a full handshake.
    pub resume_tls: AtomicBool,
    /// Upstream reports sent (registration, Lease, node and pod status, pod deletion).
    pub reports: AtomicU64,
    /// Of those, node status reports.
    pub status_reports: AtomicU64,
    /// Answers `error` to a report.
    pub errors: AtomicU64,
    /// Streams that failed and were opened again.
    pub reconnects: AtomicU64,
    /// Progress for the benchmark.
    pub events: mpsc::UnboundedSender<Event>,
    /// The first failure, for the report.
    pub first_error: wire::FirstError,
}

/// One hollow edge node.
pub(super) struct Hollow {
    index: usize,
    name: String,
    tls: ClientConfig,
    /// The TLS configuration kept across sessions (its session store), when resuming.
    kept: Arc<ClientConfig>,
    /// Held objects: key -> (uid, resourceVersion), as metamanager's store.
    held: HashMap<ResourceKey, (String, String)>,
    /// Pods whose Running status was reported, by uid.
    reported: HashMap<String, ResourceKey>,
    /// The replica of the last session.
    replica: usize,
}

impl Hollow {
    /// Node `index` named `name` with client configuration `tls`, holding nothing.
    pub(super) fn new(index: usize, name: String, tls: &ClientConfig, replicas: usize) -> Self {
        Self {
            index,
            name,
            tls: tls.clone(),
            kept: wire::h2_config(tls),
            held: HashMap::new(),
            reported: HashMap::new(),
            replica: index % replicas.max(1),
        }
    }

    /// Follows `phase` until [`Phase::Stop`]: one session per epoch, reopened on the next
    /// replica after a jittered back-off when it fails (edgehub's reconnect with
    /// `serverAlternates`).
    pub(super) async fn run(mut self, shared: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
        loop {
            let Phase::Connected(epoch) = *phase.borrow_and_update() else {
                return;
            };
            if let Err(error) = self.session(&shared, &mut phase, epoch).await {
                shared.first_error.record(&self.name, &format!("{error:#}"));
                shared.reconnects.fetch_add(1, Ordering::Relaxed);
                self.replica = (self.replica + 1) % shared.endpoints.len().max(1);
                let jitter = (self.index % 1000) as u64;
                tokio::time::sleep(Duration::from_millis(1000 + jitter)).await;
            }
        }
    }

    /// One session; returns `Ok` when the phase moved on.
    async fn session(
        &mut self,
        shared: &Shared,
        phase: &mut watch::Receiver<Phase>,
        epoch: u64,
    ) -> anyhow::Result<()> {
        let hello = EdgeHello {
            node_name: self.name.clone(),
            token: String::new(),
            inventory: Some(crate::bench::reconnect::edge::inventory(&self.held)),
            edgecore_version: "bench-fleet-hollow".to_owned(),
        };
        let tls = if shared.resume_tls.load(Ordering::Relaxed) {
            self.kept.clone()
        } else {
            wire::h2_config(&self.tls)
        };
        let endpoint = shared.endpoints[self.replica].clone();
        let wire::Session {
            tx,
            mut inbound,
            keepalive: interval,
        } = wire::open(endpoint, tls, shared.bytes.clone(), hello)
            .await
            .map_err(|e| e.error)?;
        // A session's start, as edgecore's node module: registration, Lease, full status.
        for report in [self.registration(), self.lease(), self.status(true)] {
            self.report(shared, &tx, report).await?;
        }
        let start = tokio::time::Instant::now();
        let mut keepalive = tokio::time::interval_at(start + interval, interval);
        // Status ticks spread evenly over the tick: the fractional part of index × the golden
        // ratio is equidistributed in [0, 1) for any number of nodes.
        let tick = shared.status_tick;
        let offset = tick.mul_f64((self.index as f64 * 0.618_033_988_75).fract());
        let mut status = tokio::time::interval_at(start + offset, tick);
        let mut reported = Instant::now();
        loop {
            let frame = tokio::select! {
                changed = phase.changed() => {
                    if changed.is_err() || *phase.borrow_and_update() != Phase::Connected(epoch) {
                        return Ok(());
                    }
                    continue;
                }
                _ = keepalive.tick() => {
                    wire::send(&tx, Envelope::keepalive(Module::EdgeHub, None)).await?;
                    continue;
                }
                _ = status.tick() => {
                    // Unchanged: reported only once the report period has passed.
                    let period = Duration::from_millis(shared.status_period_ms.load(Ordering::Relaxed));
                    if reported.elapsed() + Duration::from_millis(1) >= period {
                        self.report(shared, &tx, self.status(false)).await?;
                        reported = Instant::now();
                    }
                    continue;
                }
                frame = inbound.message() => frame,
            };
            let message = wire::message(frame)?;
            for reply in self.on_message(shared, message) {
                if matches!(reply.kind, Kind::Upsert { .. } | Kind::Delete { .. }) {
                    self.report(shared, &tx, reply).await?;
                } else {
                    wire::send(&tx, reply).await?;
                }
            }
        }
    }

    async fn report(
        &self,
        shared: &Shared,
        tx: &mpsc::Sender<verge_proto::hub::EdgeFrame>,
        report: Envelope,
    ) -> anyhow::Result<()> {
        shared.reports.fetch_add(1, Ordering::Relaxed);
        if let Kind::Upsert { key, .. } = &report.kind
            && key.kind == ResourceType::NodeStatus
        {
            shared.status_reports.fetch_add(1, Ordering::Relaxed);
        }
        wire::send(tx, report).await
    }

    fn upsert(write: Write, key: ResourceKey, version: ObjectVersion, body: Vec<u8>) -> Envelope {
        let kind = Kind::Upsert {
            write,
            key,
            version,
        };
        Envelope::new(Module::Edged, Group::Resource, kind, body)
    }

    /// `insert _/node/<node>`: the Node edgecore registers (its name and edge labels).
    fn registration(&self) -> Envelope {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {
                "node-role.kubernetes.io/edge": "",
                "kubernetes.io/hostname": self.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            }},
        });
        let key = ResourceKey::cluster(ResourceType::Node, &self.name);
        Self::upsert(
            Write::Insert,
            key,
            ObjectVersion::default(),
            node.to_string().into_bytes(),
        )
    }

    /// `update kube-node-lease/lease/<node>`: the Lease edgecontroller then renews.
    fn lease(&self) -> Envelope {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": verge_core::NODE_LEASE_NAMESPACE},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40,
                     "renewTime": now_micro()},
        });
        let key = ResourceKey::new(
            verge_core::NODE_LEASE_NAMESPACE,
            ResourceType::Lease,
            &self.name,
        );
        Self::upsert(
            Write::Update,
            key,
            ObjectVersion::default(),
            lease.to_string().into_bytes(),
        )
    }

    /// `update _/nodestatus/<node>`: the full status at a session's start, else only the
    /// conditions' heartbeats (an idle node's status does not change).
    fn status(&self, full: bool) -> Envelope {
        let key = ResourceKey::cluster(ResourceType::NodeStatus, &self.name);
        let body = if full {
            full_status(&self.name)
        } else {
            crate::bench::scale::hollow::status_json()
        };
        Self::upsert(Write::Update, key, ObjectVersion::default(), body)
    }

    /// Applies one downstream message; returns the ack and the reports it causes.
    fn on_message(&mut self, shared: &Shared, message: Message) -> Vec<Envelope> {
        let Ok(envelope) = Envelope::try_from(message) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match &envelope.kind {
            Kind::Upsert { key, version, .. } => {
                self.held.insert(
                    key.clone(),
                    (version.uid.clone(), version.resource_version.clone()),
                );
                if key.kind == ResourceType::Pod {
                    if key.name.starts_with("probe-") {
                        let _ = shared
                            .events
                            .send(Event::Probe(key.name.clone(), Instant::now()));
                    }
                    out.extend(self.pod_reports(key, &envelope.body));
                }
            }
            Kind::Delete { key, .. } => {
                self.held.remove(key);
                self.reported.retain(|_, k| k != key);
            }
            Kind::Resync { .. } => {
                let _ = shared.events.send(Event::Resynced {
                    index: self.index,
                    replica: self.replica,
                    at: Instant::now(),
                });
            }
            Kind::Answer { outcome, .. } => {
                if matches!(outcome, Outcome::Error(_)) {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                    shared
                        .first_error
                        .record(&self.name, &format!("answer {outcome:?}"));
                }
                return out;
            }
            _ => return out,
        }
        out.insert(
            0,
            envelope.answer(Module::MetaManager, Outcome::Ack, Vec::new()),
        );
        out
    }

    /// What edged reports for pod `key` (JSON `body`): its Running status once per uid, or
    /// its deletion once it is being deleted.
    fn pod_reports(&mut self, key: &ResourceKey, body: &[u8]) -> Option<Envelope> {
        let pod: Pod = serde_json::from_slice(body).ok()?;
        let uid = pod.metadata.uid.clone()?;
        if pod.metadata.deletion_timestamp.is_some() {
            let kind = Kind::Delete {
                key: key.clone(),
                version: ObjectVersion::uid(&uid),
            };
            return Some(Envelope::new(
                Module::Edged,
                Group::Resource,
                kind,
                Vec::new(),
            ));
        }
        if self.reported.insert(uid.clone(), key.clone()).is_some() {
            return None;
        }
        let status_key = ResourceKey::new(&key.namespace, ResourceType::PodStatus, &key.name);
        let body = running_status(&pod, self.index).to_string().into_bytes();
        Some(Self::upsert(
            Write::Update,
            status_key,
            ObjectVersion::uid(&uid),
            body,
        ))
    }
}

/// RFC 3339 with microseconds, as a Lease's `renewTime` (`MicroTime`).
fn now_micro() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The full node status of an idle edge node, about the size of edgecore's (conditions,
/// addresses, capacity and allocatable, node info, daemon endpoints; no image list).
fn full_status(name: &str) -> Vec<u8> {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = json!({"cpu": "2", "memory": "4028604Ki", "pods": "110",
                           "ephemeral-storage": "30830320Ki", "hugepages-2Mi": "0"});
    json!({
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "EdgeReady", "edge is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": name}],
        "capacity": resources, "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}},
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "6.1.0",
            "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "docker://20.10.24",
            "kubeletVersion": "v1.34.0-verge", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64"},
    })
    .to_string()
    .into_bytes()
}

/// The status edged reports for a running pod of this node (index `index`): every container
/// running and ready, an address of the node's pod network.
fn running_status(pod: &Pod, index: usize) -> serde_json::Value {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let ip = format!("10.{}.{}.2", 200 + (index >> 16) % 50, (index >> 8) % 256);
    let containers: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({"name": c.name, "image": c.image, "imageID": "", "ready": true,
                   "restartCount": 0, "started": true,
                   "containerID": format!("docker://{:064x}", index),
                   "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
    json!({
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"),
                       condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
        "containerStatuses": containers,
        "qosClass": "BestEffort",
    })
}
