//! Hollow edges: N edge nodes in this process, each one `EdgeHub.Connect` stream over its own
//! mutual-TLS connection, speaking what an idle edgecore speaks (like KubeEdge's edgemark
//! hollow nodes): the hello with the inventory of what it holds, a keepalive every interval
//! the welcome gives, an ack for every object message and `resync` marker (after "committing"
//! it to memory), and its node status every [`Shared::status_period`] (edgecore's
//! `nodeStatusReportFrequency`: an idle node's status does not change, so each report
//! carries only the conditions). What a new session of
//! a real edgecore also sends (its registration, a fresh status, its Lease) is left out: the
//! benchmark creates the Nodes itself and measures cloudhub, not API writes.
//!
//! Every node runs as one task across sessions: the benchmark moves all of them at once
//! through [`Phase`]s (connect, drop, reconnect) with a `watch` channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use tokio::sync::{mpsc, watch};
use tonic::transport::Endpoint;
use verge_core::{Envelope, Group, Kind, Module, Outcome, ResourceKey, ResourceType, Write};
use verge_proto::Message;
use verge_proto::hub::EdgeHello;

use super::wire::{self, Bytes};

/// Where the benchmark wants every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Connected in session `epoch` (a new epoch is a new session).
    Connected(u64),
    /// Every stream dropped.
    Dropped,
    /// Tasks end.
    Stop,
}

/// What a node reports to the benchmark.
#[derive(Debug)]
pub enum Event {
    /// Node `index` received the `resync` marker of its session.
    Resynced(usize, Instant),
    /// A pod or Secret named `probe-*` arrived (name, when).
    Probe(String, Instant),
}

/// What every hollow edge shares.
#[derive(Debug)]
pub struct Shared {
    /// cloudhub's edge endpoint.
    pub endpoint: Endpoint,
    /// Bytes on all the TCP streams.
    pub bytes: Arc<Bytes>,
    /// Object messages (updates, deletes) received per node since the last [`Shared::reset`].
    pub objects: Vec<AtomicU64>,
    /// Of those, updates of an object at the uid and resourceVersion the node held.
    pub redundant: Vec<AtomicU64>,
    /// Streams that failed and were opened again (edgecore's reconnect), since the last reset.
    pub reconnects: AtomicU64,
    /// Connection attempts refused or failed, since the last reset.
    pub connect_failures: AtomicU64,
    /// Node status reports sent, since the last reset.
    pub status_reports: AtomicU64,
    /// How often each node sends its status.
    pub status_period: Duration,
    /// Progress for the benchmark.
    pub events: mpsc::UnboundedSender<Event>,
    /// The first failure, for the report.
    pub first_error: wire::FirstError,
}

impl Shared {
    /// Zeroes the per-phase counters.
    pub fn reset(&self) {
        for c in self.objects.iter().chain(&self.redundant) {
            c.store(0, Ordering::Relaxed);
        }
        self.reconnects.store(0, Ordering::Relaxed);
        self.connect_failures.store(0, Ordering::Relaxed);
        self.status_reports.store(0, Ordering::Relaxed);
    }

    fn failed(&self, node: &str, error: &anyhow::Error) {
        self.first_error.record(node, &format!("{error:#}"));
    }
}

/// One hollow edge node.
pub struct Hollow {
    index: usize,
    name: String,
    tls: Arc<ClientConfig>,
    /// Held objects: key -> (uid, resourceVersion), as metamanager's store.
    held: HashMap<ResourceKey, (String, String)>,
    /// Its node status JSON.
    status: Vec<u8>,
}

impl Hollow {
    /// Node `index` named `name` with client configuration `tls` and node status JSON
    /// `status`, holding nothing.
    pub fn new(index: usize, name: String, tls: &ClientConfig, status: Vec<u8>) -> Self {
        Self {
            index,
            name,
            tls: wire::h2_config(tls),
            held: HashMap::new(),
            status,
        }
    }

    /// Follows `phase` until [`Phase::Stop`]: one session per [`Phase::Connected`] epoch,
    /// reopened with a jittered back-off when it fails (as edgecore reconnects).
    pub async fn run(mut self, shared: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
        loop {
            let current = *phase.borrow_and_update();
            match current {
                Phase::Stop => return,
                Phase::Dropped => {
                    if phase.changed().await.is_err() {
                        return;
                    }
                }
                Phase::Connected(epoch) => {
                    let result = self.session(&shared, &mut phase, epoch).await;
                    if let Err(error) = result {
                        shared.failed(&self.name, &error);
                        shared.reconnects.fetch_add(1, Ordering::Relaxed);
                        let jitter = (self.index % 1000) as u64;
                        tokio::time::sleep(Duration::from_millis(1000 + jitter)).await;
                    }
                }
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
            edgecore_version: "bench-scale-hollow".to_owned(),
        };
        let endpoint = shared.endpoint.clone();
        let wire::Session {
            tx,
            mut inbound,
            keepalive: interval,
        } = match wire::open(endpoint, self.tls.clone(), shared.bytes.clone(), hello).await {
            Ok(session) => session,
            Err(e) => {
                if e.connecting {
                    shared.connect_failures.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e.error);
            }
        };
        let start = tokio::time::Instant::now();
        let mut keepalive = tokio::time::interval_at(start + interval, interval);
        // Status reports spread evenly over the period: the fractional part of index × the
        // golden ratio is equidistributed in [0, 1) for any number of nodes.
        let period = shared.status_period;
        let offset = period.mul_f64((self.index as f64 * 0.618_033_988_75).fract());
        let mut status = tokio::time::interval_at(start + offset, period);
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
                    wire::send(&tx, self.status_report()).await?;
                    shared.status_reports.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                frame = inbound.message() => frame,
            };
            let message = wire::message(frame)?;
            if let Some(ack) = self.on_message(shared, message) {
                wire::send(&tx, ack).await?;
            }
        }
    }

    /// The `update` of `_/nodestatus/<node>` edgecore's node module sends.
    fn status_report(&self) -> Envelope {
        let kind = Kind::Upsert {
            write: Write::Update,
            key: ResourceKey::cluster(ResourceType::NodeStatus, &self.name),
            version: verge_core::ObjectVersion::default(),
        };
        Envelope::new(Module::Edged, Group::Resource, kind, self.status.clone())
    }

    /// Applies one downstream message; returns the ack to send, if any.
    fn on_message(&mut self, shared: &Shared, message: Message) -> Option<Envelope> {
        let envelope = Envelope::try_from(message).ok()?;
        match &envelope.kind {
            Kind::Upsert { key, version, .. } => {
                shared.objects[self.index].fetch_add(1, Ordering::Relaxed);
                let held = (version.uid.clone(), version.resource_version.clone());
                if self.held.get(key) == Some(&held) {
                    shared.redundant[self.index].fetch_add(1, Ordering::Relaxed);
                }
                if matches!(key.kind, ResourceType::Pod | ResourceType::Secret)
                    && key.name.starts_with("probe-")
                {
                    let _ = shared
                        .events
                        .send(Event::Probe(key.name.clone(), Instant::now()));
                }
                self.held.insert(key.clone(), held);
            }
            Kind::Delete { key, .. } => {
                shared.objects[self.index].fetch_add(1, Ordering::Relaxed);
                self.held.remove(key);
            }
            Kind::Resync { .. } => {
                let _ = shared
                    .events
                    .send(Event::Resynced(self.index, Instant::now()));
            }
            _ => return None,
        }
        Some(envelope.answer(Module::MetaManager, Outcome::Ack, Vec::new()))
    }
}

/// The node status an idle edgecore sends every `nodeStatusReportFrequency`: only its
/// conditions, each with only its type, status and new heartbeat time
/// (`edge/edged/src/node/report.rs`, `heartbeat`), JSON.
pub fn status_json() -> Vec<u8> {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let conditions: Vec<_> = [
        ("Ready", "True"),
        ("MemoryPressure", "False"),
        ("DiskPressure", "False"),
        ("PIDPressure", "False"),
        ("NetworkUnavailable", "False"),
    ]
    .into_iter()
    .map(|(kind, status)| serde_json::json!({"type": kind, "status": status, "lastHeartbeatTime": now}))
    .collect();
    serde_json::to_vec(&serde_json::json!({ "conditions": conditions })).unwrap_or_default()
}
