//! Downstream: each connected edge node's own Node object, and the pods, configmaps and
//! secrets it needs, sent to it.
//!
//! One task ([`run`]) owns the per-node [`NodeState`]s. It is driven by two typed channels:
//! [`Input`]s from the dispatcher (sessions, answers, delivery errors) and
//! [`CacheEvent`]s from the watch caches. For every input it finds the nodes concerned and
//! compares what each should hold ([`sender::desired_objects`]) with what it holds, sending
//! only the difference as `update`/`delete` messages on the [`Link`] of the cloudhub replica
//! that holds the node's session (docs/protocol.md); a node without a session gets nothing
//! (its resync on connect covers what it missed). A node that connects is compared with its inventory (resync by
//! inventory) once the caches completed their first list; the `resync` marker follows the
//! messages of that diff. A status-only change of a pod is not sent (no echo of the edge's
//! own reports, [`sender`]); neither is a status-only change of the node's Node object (its
//! heartbeat). Delivery errors of a connected node schedule a re-diff of it
//! after a backoff ([`retry`]).
//!
//! - [`sender`]: per-node state: what was sent, and the plan of what to send next.
//! - [`messages`]: construction of `update`, `delete` and `resync` messages.
//! - [`retry`]: re-diffs after delivery errors, with backoff.

pub mod messages;
pub mod sender;

use std::collections::{BTreeSet, HashMap};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_core::{Operation, ResourceKey};

use crate::cache::{CacheEvent, Caches};
use crate::desired;
use crate::hub::Link;
use retry::Retries;
pub use sender::{Contents, NodeState};
pub use verge_controller::dispatch::Input;
pub use verge_controller::retry;

/// The downstream task's state.
struct Downstream {
    caches: Caches,
    nodes: HashMap<String, NodeState>,
    /// Where each connected node's messages go.
    links: HashMap<String, Link>,
    /// Contents of disconnected nodes, for their next session (no status echo).
    remembered: HashMap<String, Contents>,
    retries: Retries,
    ready: bool,
}

/// Runs the downstream side until `shutdown` or until both input channels closed.
pub async fn run(
    caches: Caches,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    mut events: mpsc::Receiver<CacheEvent>,
    shutdown: CancellationToken,
) {
    let mut state = Downstream {
        caches: caches.clone(),
        nodes: HashMap::new(),
        links: HashMap::new(),
        remembered: HashMap::new(),
        retries: Retries::default(),
        ready: false,
    };
    let mut ready = std::pin::pin!(caches.wait_ready());
    loop {
        let due = state.retries.next_due();
        let nodes = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            result = &mut ready, if !state.ready => match result {
                Ok(()) => {
                    info!(nodes = state.nodes.len(), "caches synced, resyncing connected nodes");
                    state.ready = true;
                    state.nodes.keys().cloned().collect()
                }
                Err(_) => break,
            },
            input = inputs.recv() => match input {
                Some(input) => state.on_input(input),
                None => break,
            },
            Some(event) = events.recv() => state.on_cache(&event),
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let due = state.retries.take_due(Instant::now());
                debug!(nodes = ?due, "re-diffing nodes after delivery errors");
                due.into_iter().filter(|n| state.nodes.contains_key(n)).collect()
            }
        };
        if !state.ready {
            continue;
        }
        for node in nodes {
            if !state.sync(&node, &shutdown).await {
                return;
            }
        }
    }
    debug!("downstream ended");
}

impl Downstream {
    /// Applies a dispatcher input; returns the nodes to compare again.
    fn on_input(&mut self, input: Input) -> BTreeSet<String> {
        match input {
            Input::Connected {
                node,
                inventory,
                link,
            } => {
                if !self.caches.is_edge_node(&node) && self.ready {
                    debug!(node = %node, "connected node has no edge Node object (yet)");
                }
                let previous = self.nodes.remove(&node).map(NodeState::into_contents);
                let remembered = self.remembered.remove(&node).or(previous);
                if self.ready {
                    // Forget nodes that left the cluster.
                    self.remembered.retain(|n, _| self.caches.is_edge_node(n));
                }
                self.retries.forget(&node);
                let state = NodeState::connected(&node, &inventory, remembered.unwrap_or_default());
                self.nodes.insert(node.clone(), state);
                self.links.insert(node.clone(), link);
                return BTreeSet::from([node]);
            }
            Input::Disconnected { node } => {
                if let Some(state) = self.nodes.remove(&node) {
                    self.remembered.insert(node.clone(), state.into_contents());
                }
                self.links.remove(&node);
                self.retries.forget(&node);
            }
            Input::Answer {
                node,
                operation,
                parent_id,
            } => {
                if let Some(state) = self.nodes.get_mut(&node) {
                    if operation == Operation::Error {
                        if state.failed(&parent_id) {
                            warn!(node = %node, id = %parent_id, "edge refused a downstream message");
                        }
                    } else {
                        let again = state.answered(&parent_id);
                        self.retries.succeeded(&node);
                        if again {
                            return BTreeSet::from([node]);
                        }
                    }
                }
            }
            Input::DeliveryError { node, message_id } => {
                if let Some(state) = self.nodes.get_mut(&node) {
                    state.failed(&message_id);
                    let jitter = rand::random::<f64>();
                    if let Some(delay) = self.retries.failed(&node, Instant::now(), jitter) {
                        debug!(node = %node, ?delay, "re-diff scheduled after a delivery error");
                    }
                }
            }
        }
        BTreeSet::new()
    }

    /// The connected nodes a cache change concerns.
    fn on_cache(&mut self, event: &CacheEvent) -> BTreeSet<String> {
        let holding = |key: &ResourceKey| {
            self.nodes
                .iter()
                .filter(|(_, s)| s.held.contains_key(key))
                .map(|(n, _)| n.clone())
                .collect::<BTreeSet<_>>()
        };
        let mut nodes = match event {
            CacheEvent::Relisted => return self.nodes.keys().cloned().collect(),
            CacheEvent::Node(node) => {
                // Most Node changes are the edge's own status reports: only a node whose
                // Node object changed in content (or appeared or vanished) is compared again.
                let key = desired::node_key(node);
                let object = self.caches.get(&key);
                let changed = self
                    .nodes
                    .get_mut(node)
                    .is_some_and(|state| !state.is_current(&key, object.as_ref()));
                return if changed {
                    BTreeSet::from([node.clone()])
                } else {
                    BTreeSet::new()
                };
            }
            CacheEvent::Pod { key, node } => {
                let mut nodes = holding(key);
                nodes.extend(node.clone());
                nodes
            }
            CacheEvent::Object(key) => {
                let mut nodes = holding(key);
                for pod in self.caches.pods.state() {
                    // Only pods of connected nodes count; skip the others before walking
                    // their references.
                    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                    if let Some(bound) = bound.filter(|n| self.nodes.contains_key(*n))
                        && desired::references(&pod).contains(key)
                    {
                        nodes.insert(bound.clone());
                    }
                }
                nodes
            }
        };
        nodes.retain(|n| self.nodes.contains_key(n));
        nodes
    }

    /// Sends `node` what it misses, on the link holding its session. Returns `false` when
    /// shutdown began. When that link ended meanwhile, the rest is dropped (the dispatcher
    /// reports the node disconnected next; its reconnect resyncs it).
    async fn sync(&mut self, node: &str, shutdown: &CancellationToken) -> bool {
        let (Some(state), Some(link)) = (self.nodes.get_mut(node), self.links.get(node)) else {
            return true;
        };
        let messages = state.plan(node, &self.caches);
        if !messages.is_empty() {
            debug!(node = %node, messages = messages.len(), "sending changes down");
        }
        for message in messages {
            debug!(node = %node, operation = %message.operation(), resource = %message.path(),
                "downstream");
            tokio::select! {
                sent = link.send(node, message) => {
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
