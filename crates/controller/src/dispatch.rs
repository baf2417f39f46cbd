//! Routing of hub events from every attached cloudhub replica: session events to
//! [`Sessions`] (which replica link holds each node), to the controller's [`Handler`]
//! ([`Handler::on_session`], before the session's messages) and to its downstream task,
//! upstream messages to one worker task per node (each applying them with the
//! controller's [`Handler`]), the edge's answers to downstream messages and delivery errors
//! to the downstream task ([`Input`]). A link that ends takes its nodes with it.
//!
//! Upstream messages are answered on the link they came from, whichever replica holds the
//! node now; downstream messages go to the link holding the node's session (the downstream
//! task gets it with [`Input::Connected`]).
//!
//! Each node has [`Handler::LANES`] bounded queues (`node_queue` messages each, and together at
//! most `nodeQueueBytes`; all nodes' at most `queueBytes`), each drained by its
//! own task; a message goes to the lane of its resource (a hash of `<ns>/<type>/<name>`), so
//! messages about one object are applied in order, objects of one node may be applied side
//! by side when the controller allows more than one lane, and a slow API call for one node
//! never delays another. A full queue is answered `error` at once (back-pressure; the edge
//! keeps the report in its outbox and retries). A node's workers end when its session ends
//! and their queues are drained.

use std::collections::HashMap;
use std::future::Future;

use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};
use verge_core::{Envelope, Kind, Operation, Outcome};
use verge_proto::Inventory;
use verge_proto::hub::NodeSession;
use verge_runtime::budget::ByteBudget;

use crate::hub::{HubEvent, Link};
use crate::sessions::{Change, Sessions};
use crate::{Error, Identity};

/// What the dispatcher tells the controller's downstream task.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A node's session started (or replaced the previous one) with this inventory.
    Connected {
        /// The node.
        node: String,
        /// Every object the edge holds.
        inventory: Inventory,
        /// The replica stream holding the session: where the node's messages go.
        link: Link,
    },
    /// A node's current session ended.
    Disconnected {
        /// The node.
        node: String,
    },
    /// The edge answered a downstream message (`ack`, `response` or `error`).
    Answer {
        /// The node.
        node: String,
        /// The answer's operation; `error` makes the controller forget the message's effect.
        operation: Operation,
        /// The id of the answered message.
        parent_id: String,
    },
    /// Cloudhub could not deliver a downstream message.
    DeliveryError {
        /// The node.
        node: String,
        /// The undelivered message's id.
        message_id: String,
    },
}

/// How a controller applies one upstream message (not an answer: those go to the
/// downstream task as [`Input::Answer`]).
pub trait Handler: Clone + Send + Sync + 'static {
    /// How many messages of one node are applied at once, each lane in arrival order for the
    /// objects it holds (a message's lane follows from its resource). 1 (the default): one
    /// message of a node at a time, in arrival order, whatever it is about.
    const LANES: usize = 1;

    /// Applies `message` from `node`'s session and returns the answer to send back on the
    /// link it came from (`None`: nothing to answer). Called for one message of a node's lane
    /// at a time, in arrival order.
    fn handle(
        &self,
        node: &str,
        message: &Envelope,
    ) -> impl Future<Output = Option<Envelope>> + Send;

    /// `node`'s session started (`connected`; also a newer session replacing the current
    /// one) or its current session ended (also when the link holding it ended). Called by
    /// the dispatcher in event order, before any later message of the node reaches a worker
    /// (a worker may still be applying messages of the ended session); must not wait.
    /// Default: nothing.
    fn on_session(&self, node: &str, connected: bool) {
        let _ = (node, connected);
    }
}

/// An upstream message, the link to answer it on, and the bytes it holds of its node's and
/// the controller's budgets (given back when the job is dropped, once applied).
type Job = (Link, Envelope, Held);

/// Bytes a queued message holds of the node's and the controller's [`ByteBudget`]s.
type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// The bounds of the upstream queues (the controller's `nodeQueue`, `nodeQueueBytes` and
/// `queueBytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages per node and lane (`0` counts as `1`).
    pub messages: usize,
    /// Bytes one node's queues hold.
    pub node_bytes: usize,
    /// Bytes all nodes' queues hold together.
    pub total_bytes: usize,
}

impl QueueLimits {
    /// The limits of `config`.
    pub fn of(config: &crate::Config) -> Self {
        Self {
            messages: config.node_queue,
            node_bytes: config.node_queue_bytes,
            total_bytes: config.queue_bytes,
        }
    }
}

/// One node's lanes and byte budget.
struct NodeWorkers {
    lanes: Vec<mpsc::Sender<Job>>,
    bytes: ByteBudget,
}

/// Owns the per-node workers, the attached links and the session map; driven by the
/// [`HubEvent`]s of every attach task.
pub struct Dispatcher<H> {
    handler: H,
    identity: Identity,
    downstream: mpsc::UnboundedSender<Input>,
    links: HashMap<u64, Link>,
    node_queue: usize,
    node_bytes: usize,
    total_bytes: ByteBudget,
    workers: HashMap<String, NodeWorkers>,
    sessions: Sessions,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl<H: Handler> Dispatcher<H> {
    /// A dispatcher whose workers apply messages with `handler`, run on `tracker` and stop at
    /// `shutdown`; session changes, the edge's answers and delivery errors go to
    /// `downstream`. Refusals it answers itself (a full node queue, a used-up byte budget) come
    /// from `identity`.
    pub fn new(
        handler: H,
        identity: Identity,
        downstream: mpsc::UnboundedSender<Input>,
        limits: QueueLimits,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            handler,
            identity,
            downstream,
            links: HashMap::new(),
            node_queue: limits.messages.max(1),
            node_bytes: limits.node_bytes,
            total_bytes: ByteBudget::new(limits.total_bytes),
            workers: HashMap::new(),
            sessions: Sessions::default(),
            tracker,
            shutdown,
        }
    }

    /// The connected nodes.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Handles one event of an attach task. Never waits.
    pub fn on_event(&mut self, event: HubEvent) {
        match event {
            HubEvent::Attached(link) => {
                self.links.insert(link.id, link);
            }
            HubEvent::Session { link, session } => match self.links.get(&link).cloned() {
                Some(link) => self.on_session(&link, session),
                None => warn!(link, "frame of an unknown link ignored"),
            },
            HubEvent::Message {
                link,
                node,
                envelope,
            } => match self.links.get(&link).cloned() {
                Some(link) => self.on_message(&link, node, *envelope),
                None => warn!(link, "frame of an unknown link ignored"),
            },
            HubEvent::DeliveryError { error: e, .. } => {
                warn!(node = %e.node, message_id = %e.message_id, reason = %e.reason,
                    "cloudhub could not deliver a downstream message");
                self.to_downstream(Input::DeliveryError {
                    node: e.node,
                    message_id: e.message_id,
                });
            }
            HubEvent::Detached { link } => {
                let endpoint = self.links.remove(&link).map(|l| l.endpoint);
                let gone = self.sessions.detach(link);
                info!(link, cloudhub = ?endpoint, nodes = gone.len(),
                    "cloudhub link ended; its nodes are disconnected");
                for node in gone {
                    self.disconnected(node);
                }
            }
        }
    }

    fn disconnected(&mut self, node: String) {
        self.handler.on_session(&node, false);
        // Dropping the sender lets the worker drain its queue and end.
        self.workers.remove(&node);
        self.to_downstream(Input::Disconnected { node });
    }

    fn to_downstream(&self, input: Input) {
        if self.downstream.send(input).is_err() {
            debug!("downstream task ended, input dropped");
        }
    }

    fn on_session(&mut self, link: &Link, mut event: NodeSession) {
        let (node, hub) = (event.node.clone(), event.cloudhub.clone());
        let inventory = event.inventory.take().unwrap_or_default();
        let objects = inventory.entries.len();
        match self.sessions.apply(link.id, event) {
            Change::Connected => {
                self.handler.on_session(&node, true);
                self.to_downstream(Input::Connected {
                    node: node.clone(),
                    inventory,
                    link: link.clone(),
                });
                info!(node = %node, cloudhub = %hub, link = link.id, objects,
                    nodes = self.sessions.len(), "node connected");
            }
            Change::Disconnected => {
                self.disconnected(node.clone());
                info!(node = %node, cloudhub = %hub, nodes = self.sessions.len(),
                    "node disconnected");
            }
            Change::Stale => debug!(node = %node, cloudhub = %hub, "stale disconnect ignored"),
        }
    }

    fn on_message(&mut self, link: &Link, node: String, message: Envelope) {
        if let Kind::Answer { to, .. } = &message.kind {
            let operation = message.operation();
            debug!(node = %node, %operation, parent_id = %to,
                "edge answered a downstream message");
            self.to_downstream(Input::Answer {
                node,
                operation,
                parent_id: to.to_string(),
            });
            return;
        }
        let lane = lane_of(&message, H::LANES);
        let size = message.budget_size();
        let held = match self.take_bytes(&node, size) {
            Ok(held) => held,
            Err(error) => return self.refuse(link, &node, &message, &error),
        };
        let job = (link.clone(), message, held);
        let (_, message, _) = match self.worker(&node, lane).try_send(job) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(job)) => job,
            Err(mpsc::error::TrySendError::Closed(job)) => {
                // The worker ended (shutdown in progress); try fresh ones once.
                self.workers.remove(&node);
                match self.worker(&node, lane).try_send(job) {
                    Ok(()) => return,
                    Err(e) => e.into_inner(),
                }
            }
        };
        let error = Error::QueueFull {
            node: node.clone(),
            capacity: self.node_queue,
        };
        self.refuse(link, &node, &message, &error);
    }

    /// `size` bytes of `node`'s budget and of the controller's, or the refusal.
    fn take_bytes(&mut self, node: &str, size: usize) -> Result<Held, Error> {
        let node_budget = &self.workers_of(node).bytes;
        let Some(own) = node_budget.try_take(size) else {
            return Err(Error::QueueBytesFull {
                node: node.to_owned(),
                which: "its",
                capacity: node_budget.capacity(),
            });
        };
        let Some(all) = self.total_bytes.try_take(size) else {
            return Err(Error::QueueBytesFull {
                node: node.to_owned(),
                which: "the controller's",
                capacity: self.total_bytes.capacity(),
            });
        };
        Ok((own, all))
    }

    /// Answers `message` with `error` at once (back-pressure: the edge keeps it in its
    /// outbox and retries).
    fn refuse(&self, link: &Link, node: &str, message: &Envelope, error: &Error) {
        warn!(error = %error, id = %message.id, "upstream message refused");
        let reply = self
            .identity
            .answer(message, Outcome::Error(error.reason()), Vec::new());
        if link.try_send(node, reply).is_err() {
            warn!(node = %node, id = %message.id, "link queue full or ended, error answer dropped");
        }
    }

    /// The queue of `node`'s worker for `lane`, starting the node's workers if needed.
    fn worker(&mut self, node: &str, lane: usize) -> &mpsc::Sender<Job> {
        let lanes = &self.workers_of(node).lanes;
        &lanes[lane % lanes.len()]
    }

    /// `node`'s workers, started if needed.
    fn workers_of(&mut self, node: &str) -> &NodeWorkers {
        if !self.workers.contains_key(node) {
            let lanes = (0..H::LANES.max(1))
                .map(|lane| {
                    let (tx, rx) = mpsc::channel(self.node_queue);
                    let task = run_worker(
                        self.handler.clone(),
                        node.to_owned(),
                        rx,
                        self.shutdown.clone(),
                    );
                    self.tracker
                        .spawn(task.instrument(info_span!("node_worker", node = %node, lane)));
                    tx
                })
                .collect();
            let bytes = ByteBudget::new(self.node_bytes);
            self.workers
                .insert(node.to_owned(), NodeWorkers { lanes, bytes });
        }
        &self.workers[node]
    }
}

/// The lane (of `lanes`) of `message`: a hash of its resource path, so every message about
/// one object takes the same lane; 0 with one lane.
fn lane_of(message: &Envelope, lanes: usize) -> usize {
    use std::hash::{Hash as _, Hasher as _};
    if lanes <= 1 {
        return 0;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    message.path().hash(&mut hasher);
    // The remainder is below `lanes`, a usize.
    (hasher.finish() % lanes as u64) as usize
}

/// Applies `node`'s messages one at a time, in arrival order, and sends each answer on the
/// link the message came from (dropped if that link ended: the edge retries).
async fn run_worker<H: Handler>(
    handler: H,
    node: String,
    mut queue: mpsc::Receiver<Job>,
    shutdown: CancellationToken,
) {
    loop {
        let (link, message, held) = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            m = queue.recv() => match m { Some(m) => m, None => break },
        };
        let reply = handler.handle(&node, &message).await;
        // Applied: its bytes are free again (the answer is small).
        drop((message.body, held));
        let Some(reply) = reply else {
            continue;
        };
        tokio::select! {
            sent = link.send(&node, reply) => if sent.is_err() {
                debug!(link = link.id, "link ended, answer dropped");
            },
            () = shutdown.cancelled() => break,
        }
    }
    debug!("node worker ended");
}

#[cfg(test)]
mod tests {
    use verge_core::{Group, Module, ObjectVersion, ResourceKey, ResourceType, Write};

    use super::*;
    use crate::hub::Outbound;

    fn report(name: &str) -> Envelope {
        let kind = Kind::Upsert {
            write: Write::Update,
            key: ResourceKey::new("default", ResourceType::DeviceStatus, name),
            version: ObjectVersion::uid("u"),
        };
        Envelope::new(Module::DeviceTwin, Group::Device, kind, Vec::new())
    }

    /// Applies nothing until the test ends: every queued message keeps its bytes.
    #[derive(Clone)]
    struct Stuck;

    impl Handler for Stuck {
        async fn handle(&self, _: &str, _: &Envelope) -> Option<Envelope> {
            std::future::pending().await
        }
    }

    fn big(name: &str) -> Envelope {
        let mut message = report(name);
        message.body = vec![b'x'; 1_000];
        message.node = Some("n".to_owned());
        message
    }

    /// The reason of the next `error` answer on the link, if one came within a second.
    async fn refusal(rx: &mut mpsc::Receiver<Outbound>) -> Option<String> {
        let (_, answer) = tokio::time::timeout(std::time::Duration::from_secs(1), rx.recv())
            .await
            .ok()??;
        match answer.kind {
            Kind::Answer {
                outcome: Outcome::Error(reason),
                ..
            } => Some(reason),
            other => panic!("not an error answer: {other:?}"),
        }
    }

    #[tokio::test]
    async fn large_messages_are_bounded_by_bytes_per_node_and_in_all() {
        let (tx, mut rx) = mpsc::channel(64);
        let link = Link::new("test", tx);
        let identity = Identity {
            name: "test",
            module: Module::EdgeController,
            group: Group::Device,
        };
        let size = big("d0").budget_size();
        let limits = QueueLimits {
            messages: 1_000,
            node_bytes: 2 * size + 10,
            total_bytes: 5 * size + 10,
        };
        let (down, _down_rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let mut dispatcher = Dispatcher::new(
            Stuck,
            identity,
            down,
            limits,
            TaskTracker::new(),
            shutdown.clone(),
        );
        dispatcher.on_event(HubEvent::Attached(link.clone()));
        let mut send = |node: &str, i: usize| {
            dispatcher.on_event(HubEvent::Message {
                link: link.id,
                node: node.to_owned(),
                envelope: Box::new(big(&format!("d{i}"))),
            });
        };
        // Two of node a's fit its budget, the third is refused with "its budget".
        for i in 0..3 {
            send("a", i);
        }
        let reason = refusal(&mut rx).await.expect("third message of a refused");
        assert!(reason.contains("its budget"), "{reason}");
        // b and c hold two each; then the controller's budget (five) is used up.
        for (node, i) in [("b", 3), ("b", 4), ("c", 5)] {
            send(node, i);
        }
        assert_eq!(refusal(&mut rx).await, None, "b's two and c's first fit");
        send("c", 6);
        let reason = refusal(&mut rx).await.expect("sixth message refused");
        assert!(reason.contains("the controller's budget"), "{reason}");
        shutdown.cancel();
    }

    #[test]
    fn one_object_keeps_one_lane_and_objects_spread() {
        assert_eq!(lane_of(&report("a"), 1), 0);
        assert_eq!(lane_of(&report("a"), 8), lane_of(&report("a"), 8));
        let lanes: std::collections::BTreeSet<usize> = (0..64)
            .map(|i| lane_of(&report(&format!("d{i}")), 8))
            .collect();
        assert!(lanes.len() > 4, "{lanes:?}");
        assert!(lanes.iter().all(|l| *l < 8));
    }
}
