//! Downstream: each connected edge node's own Node object, the pods, configmaps and secrets
//! it needs, and every Service and EndpointSlice, sent to it.
//!
//! The task ([`run`]) is the shared one ([`verge_controller::downstream`]: sessions,
//! answers, delivery errors and their re-diffs after a backoff ([`retry`]), resync by
//! inventory with the `resync` marker). What is edgecontroller's own: which connected nodes
//! a [`CacheEvent`] concerns, and what each should hold ([`sender::desired_objects`]). A
//! status-only change of a pod is not sent (no echo of the edge's own reports, [`sender`]);
//! neither is a status-only change of the node's Node object (its heartbeat).
//!
//! - [`sender`]: what edgecontroller sends ([`EdgeObjects`]) and to whom.
//! - [`messages`]: construction of `update`, `delete` and `resync` messages.
//! - [`retry`]: re-diffs after delivery errors, with backoff.

pub mod messages;
pub mod sender;

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;
use verge_controller::downstream::{self, Downstream, Nodes};
use verge_core::ResourceKey;

use crate::cache::{CacheEvent, Cached, Caches};
use crate::desired;
use crate::fingerprint::Fingerprint;
pub use sender::{Contents, EdgeObjects, NodeState};
pub use verge_controller::dispatch::Input;
pub use verge_controller::retry;

/// What is edgecontroller's own in the downstream task: its caches, and the fingerprint of
/// each edge Node's site peer view last compared with its peers' holdings.
struct EdgeDownstream {
    caches: Caches,
    peer_prints: BTreeMap<String, Fingerprint>,
}

/// Runs the downstream side until `shutdown` or until both input channels closed
/// ([`verge_controller::downstream::run`]).
pub async fn run(
    caches: Caches,
    inputs: mpsc::UnboundedReceiver<Input>,
    events: mpsc::Receiver<CacheEvent>,
    shutdown: CancellationToken,
) {
    let waiter = caches.clone();
    let controller = EdgeDownstream {
        caches,
        peer_prints: BTreeMap::new(),
    };
    downstream::run(controller, waiter.wait_ready(), inputs, events, shutdown).await;
}

impl Downstream for EdgeDownstream {
    type Objects = EdgeObjects;
    type Event = CacheEvent;

    fn on_connected(&mut self, node: &str, ready: bool) {
        if !self.caches.is_edge_node(node) && ready {
            debug!(node = %node, "connected node has no edge Node object (yet)");
        }
    }

    fn is_node(&self, node: &str) -> bool {
        self.caches.is_edge_node(node)
    }

    /// The connected nodes a cache change concerns.
    fn on_cache(
        &mut self,
        event: &CacheEvent,
        nodes: &mut Nodes<EdgeObjects>,
        _ready: bool,
    ) -> BTreeSet<String> {
        match event {
            CacheEvent::Relisted | CacheEvent::Shared(_) => nodes.names(),
            CacheEvent::Node(node) => {
                // Most Node changes are the edge's own status reports: only a node whose
                // Node object changed in content (or appeared or vanished) is compared again.
                let key = desired::node_key(node);
                let object = self.caches.get(&key);
                let changed = nodes
                    .get_mut(node)
                    .is_some_and(|state| !state.is_current(&key, object.as_ref()));
                let mut concerned = BTreeSet::new();
                if changed {
                    concerned.insert(node.clone());
                }
                // Its site and group peers (now, or holding it from before) when what they
                // hold of it changes: its pod CIDR, address, site or group, not its
                // heartbeats. A heartbeat leaves the peer view's fingerprint as it was: then
                // no peer is walked.
                let changed_node = match &object {
                    Some(Cached::Node(n)) => Some(n.clone()),
                    _ => None,
                };
                let view = match &object {
                    Some(Cached::Node(n)) => Some(Cached::SitePeer(std::sync::Arc::new(
                        crate::site::peer_view(n),
                    ))),
                    _ => None,
                };
                let print = view.as_ref().map(Cached::fingerprint);
                let unchanged = print.is_some() && self.peer_prints.get(node) == print.as_ref();
                match print {
                    Some(print) => self.peer_prints.insert(node.clone(), print),
                    None => self.peer_prints.remove(node),
                };
                if unchanged {
                    return concerned;
                }
                let mut peers = nodes.holding(&key);
                let mut site_members = BTreeSet::new();
                if let Some(changed) = &changed_node {
                    for n in self.caches.nodes.state() {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        if crate::site::are_peers(changed, &n) && nodes.contains(&name) {
                            site_members.insert(name.clone());
                            peers.insert(name);
                        }
                    }
                }
                peers.remove(node);
                for peer in peers {
                    let wanted = if site_members.contains(&peer) {
                        view.as_ref()
                    } else {
                        None
                    };
                    if nodes
                        .get_mut(&peer)
                        .is_some_and(|state| !state.is_current(&key, wanted))
                    {
                        concerned.insert(peer);
                    }
                }
                concerned
            }
            CacheEvent::Pod { key, node } => {
                let mut concerned = nodes.holding(key);
                concerned.extend(node.clone());
                concerned
            }
            CacheEvent::Object(key) => {
                let mut concerned = nodes.holding(key);
                for pod in self.caches.pods.state() {
                    // Only pods of connected nodes count; skip the others before walking
                    // their references.
                    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                    if let Some(bound) = bound.filter(|n| nodes.contains(n))
                        && desired::references(&pod).contains(key)
                    {
                        concerned.insert(bound.clone());
                    }
                }
                concerned
            }
        }
    }

    fn desired(&mut self, node: &str) -> BTreeMap<ResourceKey, Cached> {
        sender::desired_objects(node, &self.caches)
    }
}
