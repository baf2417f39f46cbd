//! The registry of live edge sessions and attached controllers, and the routing between them.
//!
//! One lock guards both maps so that session events and controller snapshots are ordered: a
//! controller sees every node exactly once, either in its attach snapshot or as a later event.
//! The lock is never held across an `.await`; all sends under it are `try_send` into bounded
//! controller queues or pushes into a node's bounded [`SessionQueue`], so a slow peer never blocks
//! another.
//!
//! Each controller has two bounded queues: a *control* queue for session events and delivery
//! errors (small, one or two per session change; a controller that lets it overflow is
//! detached and must reattach for a fresh snapshot), and a *message* queue for the upstream
//! messages of its groups, which applies back-pressure: an edge session whose message finds
//! every serving controller's queue full waits for room (up to `upstream_wait`) and meanwhile
//! reads nothing more from its stream. The controller stream sends control frames first.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc::{self, error::TrySendError};
use tracing::{debug, info, warn};
use verge_core::{Envelope, Group};
use verge_proto::Inventory;
use verge_proto::hub::{CloudFrame, DeliveryError, DeliveryFailure, NodeSession};

use crate::Error;
use crate::delivery::{Origin, QueueFull};
use crate::session_queue::SessionQueue;
use crate::stream::StreamEnd;
use crate::trust::TrustError;

/// A live edge session.
pub(crate) struct NodeEntry {
    /// Unique id of the session (sent in `Welcome`).
    pub session_id: String,
    /// The node's bounded downstream queue.
    pub queue: Arc<SessionQueue>,
    /// Ends the session's stream.
    pub end: Arc<StreamEnd>,
    /// The inventory from the session's hello, replayed to controllers that attach later.
    pub inventory: Inventory,
    /// Control frames for the node (tunnel requests), sent before queued messages.
    pub control: mpsc::Sender<Box<CloudFrame>>,
}

/// What goes to an attached controller, in order. The controller stream
/// ([`crate::controller`]) writes each as a `HubFrame`.
#[derive(Debug, Clone)]
pub(crate) enum ToController {
    /// A node session started or ended.
    Session(NodeSession),
    /// An upstream message from `node` (cloud-side path).
    Message {
        /// The node whose session it came from.
        node: String,
        /// The message (boxed: it is large, the other variants small).
        envelope: Box<Envelope>,
        /// Its bytes of the node's and the controller's budgets, given back once it is
        /// written to the controller's stream (held, never read).
        _held: Arc<crate::budget::Held>,
    },
    /// A downstream message of this controller's could not be delivered.
    DeliveryError(DeliveryError),
}

/// An attached controller.
pub(crate) struct ControllerEntry {
    /// The controller's name from its hello.
    pub name: String,
    /// The user its token authenticated as (TokenReview).
    pub user: String,
    /// The groups it serves.
    pub groups: Vec<Group>,
    /// Its bounded queue of upstream messages (back-pressure, see the module docs).
    pub tx: mpsc::Sender<ToController>,
    /// The bytes its message queue may hold (`controllerQueueBytes`).
    pub budget: crate::budget::ByteBudget,
    /// Its bounded queue of session events and delivery errors, sent before messages.
    pub control: mpsc::Sender<ToController>,
    /// Ends its stream.
    pub end: Arc<StreamEnd>,
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<String, NodeEntry>,
    /// The stream address of each node in `nodes` (`verge_pki::stream_address`).
    addresses: HashMap<std::net::Ipv6Addr, String>,
    controllers: BTreeMap<u64, ControllerEntry>,
    next_controller: u64,
    round_robin: HashMap<Group, usize>,
}

/// Why a downstream message could not be enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undeliverable {
    /// The node has no session on this replica.
    NotConnected,
    /// The node's queue is full.
    QueueFull(QueueFull),
}

impl Undeliverable {
    /// The `reason` label of `verge_cloudhub_delivery_failures_total`.
    pub(crate) fn metric_reason(self) -> &'static str {
        match self {
            Self::NotConnected => "not_connected",
            Self::QueueFull(_) => "queue_full",
        }
    }

    /// The code sent in `DeliveryError.failure`.
    pub(crate) fn failure(self) -> DeliveryFailure {
        match self {
            Self::NotConnected => DeliveryFailure::NotConnected,
            Self::QueueFull(_) => DeliveryFailure::QueueFull,
        }
    }

    /// The reason sent in `DeliveryError.reason` for a message to `node`.
    pub(crate) fn reason(self, node: &str) -> String {
        match self {
            Self::NotConnected => "node not connected".to_owned(),
            Self::QueueFull(QueueFull { waiting }) => {
                format!("queue full: node {node} has {waiting} messages waiting")
            }
        }
    }
}

/// Sessions and controllers of one cloudhub replica.
pub(crate) struct Registry {
    replica: String,
    inner: Mutex<Inner>,
}

impl Registry {
    /// An empty registry for the replica named `replica`.
    pub(crate) fn new(replica: String) -> Self {
        Self {
            replica,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn session_frame(
        &self,
        node: &str,
        connected: bool,
        inventory: Option<Inventory>,
    ) -> ToController {
        ToController::Session(NodeSession {
            node: node.to_owned(),
            connected,
            inventory,
            cloudhub: self.replica.clone(),
        })
    }

    /// Sends `frame` to every controller; a controller whose queue is full is detached
    /// (it must reattach to get a consistent snapshot).
    fn broadcast(&self, inner: &mut Inner, frame: &ToController) {
        inner
            .controllers
            .retain(|id, c| offer(*id, c, frame.clone()));
    }

    /// Sends the control `frame` (a delivery error) to controller `id` without waiting; a
    /// controller whose control queue is full is detached as in [`Registry::broadcast`]. A
    /// controller gone meanwhile is skipped.
    pub(crate) fn send_to_controller(&self, id: u64, frame: ToController) {
        let mut inner = self.lock();
        let Some(c) = inner.controllers.get(&id) else {
            debug!(id, "controller gone; frame dropped");
            return;
        };
        if !offer(id, c, frame) {
            inner.controllers.remove(&id);
        }
    }

    /// Makes `entry` the session of `node`, ending the previous one with
    /// [`Error::Replaced`], and announces it to every controller. A new node is refused
    /// when `max_sessions` nodes have sessions already (a node replacing its own session is
    /// always accepted).
    ///
    /// # Errors
    /// [`Error::TooManySessions`] (nothing changed).
    pub(crate) fn attach_node(
        &self,
        node: &str,
        entry: NodeEntry,
        max_sessions: usize,
    ) -> Result<(), Error> {
        let frame = self.session_frame(node, true, Some(entry.inventory.clone()));
        let mut inner = self.lock();
        if !inner.nodes.contains_key(node) && inner.nodes.len() >= max_sessions {
            return Err(Error::TooManySessions(max_sessions));
        }
        if let Some(old) = inner.nodes.insert(node.to_owned(), entry) {
            info!(node, old_session = %old.session_id, "session replaced by a newer one");
            old.end.finish(Some(Error::Replaced));
        } else {
            let address = verge_pki::stream_address(node);
            inner.addresses.insert(address, node.to_owned());
        }
        crate::metrics::global().set_sessions(inner.nodes.len());
        self.broadcast(&mut inner, &frame);
        Ok(())
    }

    /// Ends `node`'s session on this replica, if it has one, with `reason` (its stream then
    /// detaches as on any end). Returns whether there was one.
    pub(crate) fn end_node(&self, node: &str, reason: Error) -> bool {
        let inner = self.lock();
        let Some(entry) = inner.nodes.get(node) else {
            return false;
        };
        info!(node, session = %entry.session_id, %reason, "session ended");
        entry.end.finish(Some(reason));
        true
    }

    /// The control queue of `node`'s session on this replica, if it has one.
    pub(crate) fn tunnel_control(&self, node: &str) -> Option<mpsc::Sender<Box<CloudFrame>>> {
        self.lock()
            .nodes
            .get(node)
            .map(|entry| entry.control.clone())
    }

    /// The node whose stream address (`verge_pki::stream_address`) is `address`, if it has
    /// a session on this replica.
    pub(crate) fn node_at(&self, address: &std::net::Ipv6Addr) -> Option<String> {
        self.lock().addresses.get(address).cloned()
    }

    /// Removes the session `session_id` of `node` if it is still the current one and then
    /// announces the disconnect.
    pub(crate) fn detach_node(&self, node: &str, session_id: &str) {
        let mut inner = self.lock();
        if inner
            .nodes
            .get(node)
            .is_none_or(|s| s.session_id != session_id)
        {
            return;
        }
        inner.nodes.remove(node);
        inner.addresses.remove(&verge_pki::stream_address(node));
        crate::metrics::global().set_sessions(inner.nodes.len());
        let frame = self.session_frame(node, false, None);
        self.broadcast(&mut inner, &frame);
    }

    /// Registers a controller; returns its id and a connected `NodeSession` for every node
    /// connected now, to be sent before anything queued later.
    ///
    /// The newest attach of a name takes over: a controller already attached with the same
    /// name by the same user (an earlier stream of the same replica, or the previous leader
    /// of its replicas) is detached, its stream ended with [`Error::ControllerReplaced`], so
    /// upstream messages never go to a stream that is half-dead or whose controller stopped
    /// leading. Controllers of other names or users are unaffected.
    ///
    /// # Errors
    /// [`TrustError::GroupTaken`] when another user's controller serves one of its
    /// third-party groups; nothing changes then.
    pub(crate) fn attach_controller(
        &self,
        entry: ControllerEntry,
    ) -> Result<(u64, Vec<ToController>), TrustError> {
        let mut inner = self.lock();
        // One user serves a third-party group at a time (its replicas share it).
        for group in entry.groups.iter().filter(|g| !g.is_verge()) {
            let owner = inner
                .controllers
                .values()
                .find(|c| c.user != entry.user && c.groups.contains(group));
            if let Some(owner) = owner {
                return Err(TrustError::GroupTaken {
                    group: group.to_string(),
                    owner: owner.user.clone(),
                    controller: owner.name.clone(),
                });
            }
        }
        inner.controllers.retain(|id, c| {
            let same = c.name == entry.name && c.user == entry.user;
            if same {
                info!(controller = %c.name, id, "controller replaced by a newer attach");
                c.end.finish(Some(Error::ControllerReplaced));
            }
            !same
        });
        let snapshot = inner
            .nodes
            .iter()
            .map(|(node, s)| self.session_frame(node, true, Some(s.inventory.clone())))
            .collect();
        let id = inner.next_controller;
        inner.next_controller += 1;
        inner.controllers.insert(id, entry);
        Ok((id, snapshot))
    }

    /// Forgets controller `id`.
    pub(crate) fn detach_controller(&self, id: u64) {
        self.lock().controllers.remove(&id);
    }

    /// The message queues of the controllers serving `group`, in the order to try them
    /// (round-robin: the first differs per call).
    ///
    /// # Errors
    /// A reason for the edge when no controller serves the group.
    pub(crate) fn upstream_targets(&self, group: Group) -> Result<Vec<UpstreamTarget>, String> {
        let mut inner = self.lock();
        let Inner {
            controllers,
            round_robin,
            ..
        } = &mut *inner;
        let mut serving: Vec<UpstreamTarget> = controllers
            .values()
            .filter(|c| c.groups.contains(&group))
            .map(|c| UpstreamTarget {
                name: c.name.clone(),
                tx: c.tx.clone(),
                budget: c.budget.clone(),
            })
            .collect();
        if serving.is_empty() {
            return Err(format!("no controller attached for group \"{group}\""));
        }
        let counter = round_robin.entry(group).or_default();
        let start = *counter % serving.len();
        *counter = counter.wrapping_add(1);
        serving.rotate_left(start);
        Ok(serving)
    }

    /// Queues the edge-side `message` from `origin` on the session of `node` without
    /// waiting.
    ///
    /// # Errors
    /// [`Undeliverable`] when the node has no session or its queue is full.
    pub(crate) fn deliver(
        &self,
        node: &str,
        message: Envelope,
        origin: Origin,
    ) -> Result<(), Undeliverable> {
        let inner = self.lock();
        let session = inner.nodes.get(node).ok_or(Undeliverable::NotConnected)?;
        session
            .queue
            .push(message, origin)
            .map_err(Undeliverable::QueueFull)
    }
}

/// Where an upstream message may go: one serving controller's message queue.
pub(crate) struct UpstreamTarget {
    /// The controller's name.
    pub name: String,
    /// Its message queue.
    pub tx: mpsc::Sender<ToController>,
    /// The bytes its message queue may hold.
    pub budget: crate::budget::ByteBudget,
}

/// Offers the control `frame` to controller `c`; returns whether it stays attached (a full
/// control queue ends its stream with [`Error::ControllerQueueFull`], a closed one is gone
/// already).
fn offer(id: u64, c: &ControllerEntry, frame: ToController) -> bool {
    match c.control.try_send(frame) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) => {
            warn!(controller = %c.name, id, "controller control queue full; detaching it");
            c.end
                .finish(Some(Error::ControllerQueueFull(c.control.max_capacity())));
            false
        }
        Err(TrySendError::Closed(_)) => false,
    }
}
