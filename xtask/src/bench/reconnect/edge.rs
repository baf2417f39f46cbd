//! One simulated edge node: an `EdgeHub.Connect` stream that says hello with its inventory,
//! sends keepalives, stores (uid, resourceVersion) of every object `update`, forgets every
//! `delete`, acks every object message and the `resync` end marker, and reports its progress
//! to the phase driver.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use prost::Message as _;
use rustls::ClientConfig;
use tokio::sync::{mpsc, watch};
use tonic::transport::Endpoint;
use verge_core::{Group, Operation, ResourceKey};
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{CloudFrame, EdgeFrame, EdgeHello, cloud_frame, edge_frame};
use verge_proto::{Inventory, InventoryEntry, Message, MessageExt};

/// Attempts to open the stream before the node counts as failed (cloudhub may refuse
/// connections for a moment while 1,000 arrive at once).
const CONNECT_ATTEMPTS: u32 = 8;

/// A simulated edge node and what it holds across sessions.
#[derive(Debug, Clone)]
pub struct SimEdge {
    /// Index of the node (for events).
    pub index: usize,
    /// The node name.
    pub name: String,
    /// Held objects: key -> (uid, resourceVersion).
    pub held: HashMap<ResourceKey, (String, String)>,
    /// Its mutual-TLS client configuration (a node certificate from the Verge CA).
    pub tls: Arc<ClientConfig>,
}

impl SimEdge {
    /// A node holding nothing.
    pub fn new(index: usize, name: String, tls: Arc<ClientConfig>) -> Self {
        Self {
            index,
            name,
            held: HashMap::new(),
            tls,
        }
    }

    /// The inventory of everything held.
    pub fn inventory(&self) -> Inventory {
        inventory(&self.held)
    }
}

/// The inventory of `held` (key -> (uid, resourceVersion)), as edgecore sends it in its hello.
pub(in crate::bench) fn inventory(held: &HashMap<ResourceKey, (String, String)>) -> Inventory {
    Inventory {
        entries: held
            .iter()
            .map(|(key, (uid, rv))| InventoryEntry {
                r#type: key.kind.as_str().to_owned(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                uid: uid.clone(),
                resource_version: rv.clone(),
            })
            .collect(),
    }
}

/// The `resync` end marker's summary (`{"updates": n, "deletes": n}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marker {
    /// Updates the controller sent before the marker.
    pub updates: u64,
    /// Deletes the controller sent before the marker.
    pub deletes: u64,
}

/// What one session of one node saw.
#[derive(Debug, Clone, Default)]
pub struct SessionStats {
    /// Encoded size of the hello frame (with the inventory), bytes.
    pub hello_bytes: usize,
    /// Attempts needed to open the stream.
    pub attempts: u32,
    /// Object `update`s received.
    pub updates: u64,
    /// Object `delete`s received.
    pub deletes: u64,
    /// Updates of an object at the uid and resourceVersion the node already held (what resync
    /// by inventory exists to avoid).
    pub redundant: u64,
    /// Object messages (updates and deletes) by resource type (`node`, `pod`, `configmap`).
    pub by_type: std::collections::BTreeMap<&'static str, u64>,
    /// The `resync` marker, if received.
    pub marker: Option<Marker>,
    /// Time from the phase start to the marker.
    pub marker_after: Option<Duration>,
    /// Time from the phase start to holding the expected object count.
    pub complete_after: Option<Duration>,
    /// `error` messages received (for example cloudhub refusing to forward an ack).
    pub errors: u64,
    /// Keepalive answers received.
    pub keepalives: u64,
    /// Other messages received.
    pub other: u64,
    /// Frames sent after the hello (acks and keepalives).
    pub sent: u64,
    /// Objects held when the session ended.
    pub held_at_end: usize,
}

impl SessionStats {
    /// Object messages (updates and deletes) received.
    pub fn objects(&self) -> u64 {
        self.updates + self.deletes
    }
}

/// Progress reported to the phase driver.
#[derive(Debug)]
pub enum Event {
    /// The node holds the expected number of objects.
    Complete(usize, Duration),
    /// The node received the `resync` marker.
    Marker(usize, Duration),
    /// The session failed (or ended before the phase was stopped).
    Failed(String),
}

/// What every session of a phase shares.
#[derive(Debug)]
pub struct PhaseShared {
    /// The phase start.
    pub t0: Instant,
    /// Objects each node should hold.
    pub expected: usize,
    /// Nanoseconds after `t0` of the last object message received by any node.
    pub last_object_ns: AtomicU64,
    /// Progress events.
    pub events: mpsc::UnboundedSender<Event>,
}

impl PhaseShared {
    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }
}

/// Runs one session of `edge` on `channel` until `stop` turns true; returns the node (with
/// what it now holds) and the session's figures. A failure is reported as [`Event::Failed`].
pub async fn session(
    mut edge: SimEdge,
    channel: Endpoint,
    shared: Arc<PhaseShared>,
    stop: watch::Receiver<bool>,
) -> (SimEdge, SessionStats) {
    let mut stats = SessionStats::default();
    if let Err(error) = run(&mut edge, channel, &shared, stop, &mut stats).await {
        let _ = shared
            .events
            .send(Event::Failed(format!("{}: {error:#}", edge.name)));
    }
    stats.held_at_end = edge.held.len();
    (edge, stats)
}

async fn run(
    edge: &mut SimEdge,
    channel: Endpoint,
    shared: &PhaseShared,
    mut stop: watch::Receiver<bool>,
    stats: &mut SessionStats,
) -> anyhow::Result<()> {
    let hello = EdgeFrame {
        frame: Some(edge_frame::Frame::Hello(EdgeHello {
            node_name: edge.name.clone(),
            token: String::new(),
            inventory: Some(edge.inventory()),
            edgecore_version: "bench-reconnect".to_owned(),
        })),
    };
    stats.hello_bytes = hello.encoded_len();
    let (tx, mut inbound) = open(edge, channel, hello, stats).await?;
    let welcome = match inbound.message().await.context("awaiting welcome")? {
        Some(CloudFrame {
            frame: Some(cloud_frame::Frame::Welcome(w)),
        }) => w,
        other => bail!("expected a welcome, got {other:?}"),
    };
    let interval = Duration::from_millis(welcome.keepalive_interval_ms.max(100));
    let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut complete = false;
    check_complete(edge, shared, stats, &mut complete);
    loop {
        let frame = tokio::select! {
            stopped = stop.wait_for(|s| *s) => {
                drop(stopped);
                return Ok(());
            }
            _ = keepalive.tick() => None,
            frame = inbound.message() => Some(frame),
        };
        let Some(frame) = frame else {
            let ka = Message::build(
                verge_core::MessageId::new().to_string(),
                "edgehub",
                Group::Hub,
                Operation::Keepalive,
                "",
                Vec::new(),
            );
            send(&tx, ka, stats).await?;
            continue;
        };
        let message = match frame {
            Ok(Some(CloudFrame {
                frame: Some(cloud_frame::Frame::Message(m)),
            })) => m,
            Ok(Some(other)) => bail!("unexpected frame {other:?}"),
            Ok(None) => bail!("cloudhub ended the stream"),
            Err(status) => bail!("stream failed: {status}"),
        };
        if let Some(ack) = on_message(edge, shared, stats, &message) {
            send(&tx, ack, stats).await?;
        }
        check_complete(edge, shared, stats, &mut complete);
    }
}

/// Opens the stream, retrying transport failures with a short linear backoff (jittered by
/// the node index).
async fn open(
    edge: &SimEdge,
    endpoint: Endpoint,
    hello: EdgeFrame,
    stats: &mut SessionStats,
) -> anyhow::Result<(mpsc::Sender<EdgeFrame>, tonic::Streaming<CloudFrame>)> {
    let mut last = None;
    for attempt in 1..=CONNECT_ATTEMPTS {
        stats.attempts = attempt;
        let (tx, rx) = mpsc::channel::<EdgeFrame>(128);
        tx.send(hello.clone()).await?;
        let outbound = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|frame| (frame, rx))
        });
        let channel =
            match verge_proto::transport::connect_tls(endpoint.clone(), edge.tls.clone(), None)
                .await
            {
                Ok(channel) => channel,
                Err(error) => {
                    last = Some(tonic::Status::unavailable(error.to_string()));
                    let jitter = (edge.index % 97) as u64;
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt) + jitter))
                        .await;
                    continue;
                }
            };
        let mut client = EdgeHubClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        match client.connect(outbound).await {
            Ok(response) => return Ok((tx, response.into_inner())),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                last = Some(status);
                let jitter = (edge.index % 97) as u64;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt) + jitter)).await;
            }
            Err(status) => bail!("connect refused: {status}"),
        }
    }
    bail!(
        "connect failed {CONNECT_ATTEMPTS} times, last: {}",
        last.map_or_else(String::new, |s| s.to_string())
    )
}

async fn send(
    tx: &mpsc::Sender<EdgeFrame>,
    message: Message,
    stats: &mut SessionStats,
) -> anyhow::Result<()> {
    let frame = EdgeFrame {
        frame: Some(edge_frame::Frame::Message(message)),
    };
    tx.send(frame)
        .await
        .map_err(|_| anyhow::anyhow!("outbound stream closed"))?;
    stats.sent += 1;
    Ok(())
}

/// Applies one message; returns the ack to send, if any.
fn on_message(
    edge: &mut SimEdge,
    shared: &PhaseShared,
    stats: &mut SessionStats,
    message: &Message,
) -> Option<Message> {
    let operation = message.operation().ok();
    match operation {
        Some(Operation::Update | Operation::Delete) => {
            let now = u64::try_from(shared.elapsed().as_nanos()).unwrap_or(u64::MAX);
            shared.last_object_ns.fetch_max(now, Ordering::Relaxed);
            if let Ok(key) = message.edge_key() {
                *stats.by_type.entry(key.kind.metric_label()).or_default() += 1;
                if operation == Some(Operation::Update) {
                    stats.updates += 1;
                    let header = message.header.clone().unwrap_or_default();
                    let version = (header.uid, header.resource_version);
                    if edge.held.get(&key) == Some(&version) {
                        stats.redundant += 1;
                    }
                    edge.held.insert(key, version);
                } else {
                    stats.deletes += 1;
                    edge.held.remove(&key);
                }
            }
        }
        Some(Operation::Resync) => {
            let summary: serde_json::Value =
                serde_json::from_slice(&message.content).unwrap_or_default();
            let count = |field: &str| summary.get(field).and_then(serde_json::Value::as_u64);
            stats.marker = Some(Marker {
                updates: count("updates").unwrap_or(0),
                deletes: count("deletes").unwrap_or(0),
            });
            let at = shared.elapsed();
            stats.marker_after.get_or_insert(at);
            let _ = shared.events.send(Event::Marker(edge.index, at));
        }
        Some(Operation::Keepalive) => {
            stats.keepalives += 1;
            return None;
        }
        Some(Operation::Error) => {
            stats.errors += 1;
            return None;
        }
        _ => {
            stats.other += 1;
            return None;
        }
    }
    Some(Message::reply(
        verge_core::MessageId::new().to_string(),
        message.id(),
        "metamanager",
        message.group().unwrap_or(Group::Resource),
        Operation::Ack,
        message.resource(),
        Vec::new(),
    ))
}

fn check_complete(
    edge: &SimEdge,
    shared: &PhaseShared,
    stats: &mut SessionStats,
    complete: &mut bool,
) {
    if !*complete && edge.held.len() >= shared.expected {
        *complete = true;
        let at = shared.elapsed();
        stats.complete_after = Some(at);
        let _ = shared.events.send(Event::Complete(edge.index, at));
    }
}
