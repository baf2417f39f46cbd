//! The downstream task every controller runs: one task ([`run`]) owns the per-node
//! [`NodeState`]s ([`Nodes`]) and is driven by two typed channels, [`Input`]s from the
//! dispatcher (sessions, answers, delivery errors) and the controller's cache events.
//!
//! For every input it finds the nodes concerned and compares what each should hold
//! ([`Downstream::desired`]) with what it holds, sending only the difference as
//! `update`/`delete` messages on the [`Link`] of the cloudhub replica that holds the node's
//! session (docs/protocol.md); a node without a session gets nothing (its resync on connect
//! covers what it missed). A node that connects is compared with its inventory (resync by
//! inventory) once the caches completed their first list; the `resync` marker follows the
//! messages of that diff. The contents of a node that disconnects are remembered for its
//! next session (no echo, [`crate::sender`]). Delivery errors of a connected node schedule
//! a re-diff of it after a backoff ([`Retries`]); an edge `error` answer forgets what the
//! message carried.
//!
//! Tracing: the sends caused by one cache event run in a `controller.watch_event` span, the
//! resync of a node that connected in a `controller.resync` span, and every object message
//! continues the trace of its delivery (`crate::deliveries`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, warn};
use verge_core::{Operation, ResourceKey};

use crate::deliveries::Deliveries;
use crate::dispatch::Input;
use crate::hub::Link;
use crate::retry::Retries;
use crate::sender::{Contents, NodeObjects, NodeState};

/// What is a controller's own in its downstream task: its caches (which nodes a cache event
/// concerns, what a node should hold) and its reactions to them.
pub trait Downstream {
    /// What it sends down.
    type Objects: NodeObjects;
    /// An event of its watch caches.
    type Event;

    /// The caches completed their first list (once): e.g. validate what they hold.
    fn on_ready(&mut self) {}

    /// `node` connected (before its state is made); `ready`: the caches are synced.
    fn on_connected(&mut self, _node: &str, _ready: bool) {}

    /// Whether `node` is still in the cluster (contents of nodes that are not are
    /// forgotten).
    fn is_node(&self, node: &str) -> bool;

    /// The connected nodes `event` concerns (others are dropped by the caller); `ready`:
    /// the caches are synced.
    fn on_cache(
        &mut self,
        event: &Self::Event,
        nodes: &mut Nodes<Self::Objects>,
        ready: bool,
    ) -> BTreeSet<String>;

    /// The objects `node` should hold now.
    fn desired(
        &mut self,
        node: &str,
    ) -> BTreeMap<ResourceKey, <Self::Objects as NodeObjects>::Object>;
}

/// The connected nodes of a downstream task: their states and links, the remembered
/// contents of disconnected ones, the re-diff backoff.
#[derive(Debug)]
pub struct Nodes<P> {
    states: HashMap<String, NodeState<P>>,
    /// Where each connected node's messages go.
    links: HashMap<String, Link>,
    /// Contents of disconnected nodes, for their next session (no echo).
    remembered: HashMap<String, Contents>,
    retries: Retries,
}

impl<P: NodeObjects> Default for Nodes<P> {
    fn default() -> Self {
        Self {
            states: HashMap::new(),
            links: HashMap::new(),
            remembered: HashMap::new(),
            retries: Retries::default(),
        }
    }
}

impl<P: NodeObjects> Nodes<P> {
    /// Whether `node` is connected.
    pub fn contains(&self, node: &str) -> bool {
        self.states.contains_key(node)
    }

    /// The connected nodes.
    pub fn names(&self) -> BTreeSet<String> {
        self.states.keys().cloned().collect()
    }

    /// The state of connected `node`.
    pub fn get_mut(&mut self, node: &str) -> Option<&mut NodeState<P>> {
        self.states.get_mut(node)
    }

    /// The connected nodes that hold `key`.
    pub fn holding(&self, key: &ResourceKey) -> BTreeSet<String> {
        self.states
            .iter()
            .filter(|(_, s)| s.held.contains_key(key))
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Runs the downstream side of `controller` until `shutdown` or until both input channels
/// closed; nothing is compared before `ready` (the caches' first list) completed, and an
/// error of it ends the task.
pub async fn run<D: Downstream, E>(
    mut controller: D,
    ready: impl Future<Output = Result<(), E>>,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    mut events: mpsc::Receiver<D::Event>,
    shutdown: CancellationToken,
) {
    let mut task = Task {
        nodes: Nodes::<D::Objects>::default(),
        ready: false,
        deliveries: Deliveries::default(),
        pruned_at: None,
    };
    let mut ready = std::pin::pin!(ready);
    loop {
        let due = task.nodes.retries.next_due();
        let mut watched = false;
        let mut connected = false;
        let nodes = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            result = &mut ready, if !task.ready => match result {
                Ok(()) => {
                    info!(nodes = task.nodes.states.len(), "caches synced, resyncing connected nodes");
                    task.ready = true;
                    controller.on_ready();
                    task.nodes.names()
                }
                Err(_) => break,
            },
            input = inputs.recv() => match input {
                Some(input) => {
                    connected = matches!(input, Input::Connected { .. });
                    task.on_input(&mut controller, input)
                }
                None => break,
            },
            Some(event) = events.recv() => {
                let mut nodes = controller.on_cache(&event, &mut task.nodes, task.ready);
                nodes.retain(|n| task.nodes.contains(n));
                watched = true;
                nodes
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let due = task.nodes.retries.take_due(Instant::now());
                debug!(nodes = ?due, "re-diffing nodes after delivery errors");
                due.into_iter().filter(|n| task.nodes.contains(n)).collect()
            }
        };
        if !task.ready {
            continue;
        }
        let span = if watched && !nodes.is_empty() {
            verge_telemetry::span!("controller.watch_event", verge.nodes = nodes.len())
        } else if connected {
            let node = nodes.first().map(String::as_str).unwrap_or_default();
            verge_telemetry::span!("controller.resync", verge.node = %node)
        } else {
            tracing::Span::none()
        };
        let synced = async {
            for node in nodes {
                if !task.sync(&mut controller, &node, &shutdown).await {
                    return false;
                }
            }
            true
        };
        if !synced.instrument(span).await {
            return;
        }
    }
    debug!("downstream ended");
}

/// The downstream task's state.
struct Task<P> {
    nodes: Nodes<P>,
    ready: bool,
    deliveries: Deliveries,
    /// When the state of nodes that left the cluster was last dropped.
    pruned_at: Option<Instant>,
}

/// How often, at most, a connect drops the remembered state of nodes that left the cluster.
/// Dropping it walks every remembered node; done on every connect, a reconnect storm of N
/// nodes (each remembered since its disconnect) cost N² look-ups in this one task.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl<P: NodeObjects> Task<P> {
    /// Applies a dispatcher input; returns the nodes to compare again.
    fn on_input<D>(&mut self, controller: &mut D, input: Input) -> BTreeSet<String>
    where
        D: Downstream<Objects = P>,
    {
        let nodes = &mut self.nodes;
        match input {
            Input::Connected {
                node,
                inventory,
                link,
            } => {
                controller.on_connected(&node, self.ready);
                let previous = nodes.states.remove(&node).map(NodeState::into_contents);
                let remembered = nodes.remembered.remove(&node).or(previous);
                let due = self.pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY);
                if self.ready && due {
                    // Forget nodes that left the cluster.
                    self.pruned_at = Some(Instant::now());
                    nodes.remembered.retain(|n, _| controller.is_node(n));
                    self.deliveries.retain(|n| controller.is_node(n));
                }
                nodes.retries.forget(&node);
                let state = NodeState::connected(&node, &inventory, remembered.unwrap_or_default());
                nodes.states.insert(node.clone(), state);
                nodes.links.insert(node.clone(), link);
                return BTreeSet::from([node]);
            }
            Input::Disconnected { node } => {
                if let Some(state) = nodes.states.remove(&node) {
                    nodes.remembered.insert(node.clone(), state.into_contents());
                }
                nodes.links.remove(&node);
                nodes.retries.forget(&node);
            }
            Input::Answer {
                node,
                operation,
                parent_id,
            } => {
                let refused = operation == Operation::Error;
                self.deliveries.answered(&node, &parent_id, refused);
                if let Some(state) = nodes.states.get_mut(&node) {
                    if refused {
                        if state.failed(&parent_id) {
                            warn!(node = %node, id = %parent_id, "edge refused a downstream message");
                        }
                    } else {
                        let again = state.answered(&parent_id);
                        nodes.retries.succeeded(&node);
                        if again {
                            return BTreeSet::from([node]);
                        }
                    }
                }
            }
            Input::DeliveryError { node, message_id } => {
                self.deliveries.failed(&node, &message_id);
                if let Some(state) = nodes.states.get_mut(&node) {
                    state.failed(&message_id);
                    let jitter = rand::random::<f64>();
                    if let Some(delay) = nodes.retries.failed(&node, Instant::now(), jitter) {
                        debug!(node = %node, ?delay, "re-diff scheduled after a delivery error");
                    }
                }
            }
        }
        BTreeSet::new()
    }

    /// Sends `node` what it misses, on the link holding its session. Returns `false` when
    /// shutdown began. When that link ended meanwhile, the rest is dropped (the dispatcher
    /// reports the node disconnected next; its reconnect resyncs it).
    async fn sync<D>(
        &mut self,
        controller: &mut D,
        node: &str,
        shutdown: &CancellationToken,
    ) -> bool
    where
        D: Downstream<Objects = P>,
    {
        let nodes = &mut self.nodes;
        let (Some(state), Some(link)) = (nodes.states.get_mut(node), nodes.links.get(node)) else {
            return true;
        };
        let messages = state.plan_objects(node, &controller.desired(node));
        if !messages.is_empty() {
            debug!(node = %node, messages = messages.len(), "sending changes down");
        }
        for mut message in messages {
            debug!(node = %node, operation = %message.operation(), resource = %message.path(),
                "downstream");
            let span = self.deliveries.send_span(node, &mut message);
            tokio::select! {
                sent = link.send(node, message).instrument(span) => {
                    if sent.is_err() {
                        debug!(node = %node, link = link.id, "link ended, downstream messages dropped");
                        return true;
                    }
                }
                () = shutdown.cancelled() => return false,
            }
        }
        true
    }
}
