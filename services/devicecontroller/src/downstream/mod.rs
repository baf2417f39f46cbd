//! Downstream: each connected edge node's Devices and the DeviceModels they use, sent to it;
//! and the Warning events of Devices that cannot be sent.
//!
//! One task ([`run`]) owns the per-node [`NodeState`]s. It is driven by two typed channels:
//! [`Input`]s from the dispatcher (sessions, answers, delivery errors) and [`CacheEvent`]s
//! from the watch caches. For every input it finds the nodes concerned and compares what
//! each should hold ([`desired::desired`]) with what it holds, sending only the difference
//! as `update`/`delete` messages (group `device`) on the [`Link`] of the cloudhub replica
//! that holds the node's session; a node without a session gets nothing (its resync on
//! connect covers what it missed). A node that connects is compared with its inventory
//! (types `device` and `devicemodel` only) once the caches completed their first list; its
//! `resync` marker follows. A Device moved to another node is deleted on the old one and
//! sent to the new one; a deleted Device is deleted on its node. Delivery errors of a
//! connected node schedule a re-diff after a backoff ([`Retries`]).
//!
//! Every Device whose content or model changed is validated; a problem is reported once
//! per Device ([`Reported`]) to the event task ([`crate::problems`]).
//!
//! - [`sender`]: per-node state: what was sent, and the plan of what to send next.
//! - [`messages`]: construction of `update`, `delete` and `resync` messages.

pub mod messages;
pub mod sender;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::api::DynamicObject;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_controller::dispatch::Input;
use verge_controller::hub::Link;
use verge_controller::retry::Retries;
use verge_core::{Operation, ResourceKey};

use crate::cache::{CacheEvent, Caches};
use crate::desired;
use crate::problems::{Report, Reported};
pub use sender::{Contents, NodeState};

/// The downstream task's state.
struct Downstream {
    caches: Caches,
    nodes: HashMap<String, NodeState>,
    /// Where each connected node's messages go.
    links: HashMap<String, Link>,
    /// Contents of disconnected nodes, for their next session (no echo).
    remembered: HashMap<String, Contents>,
    retries: Retries,
    ready: bool,
    reported: Reported,
    reports: mpsc::Sender<Report>,
}

/// Runs the downstream side until `shutdown` or until both input channels closed; Device
/// problems go to `reports`.
pub async fn run(
    caches: Caches,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    mut events: mpsc::Receiver<CacheEvent>,
    reports: mpsc::Sender<Report>,
    shutdown: CancellationToken,
) {
    let mut state = Downstream {
        caches: caches.clone(),
        nodes: HashMap::new(),
        links: HashMap::new(),
        remembered: HashMap::new(),
        retries: Retries::default(),
        ready: false,
        reported: Reported::default(),
        reports,
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
                    state.validate_all();
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
                let previous = self.nodes.remove(&node).map(NodeState::into_contents);
                let remembered = self.remembered.remove(&node).or(previous);
                if self.ready {
                    // Forget nodes that left the cluster.
                    self.remembered.retain(|n, _| self.caches.is_edge_node(n));
                }
                self.retries.forget(&node);
                let state = NodeState::connected(&inventory, remembered.unwrap_or_default());
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

    /// Validates what a cache change touched and returns the connected nodes it concerns.
    fn on_cache(&mut self, event: &CacheEvent) -> BTreeSet<String> {
        let holding = |key: &ResourceKey| {
            self.nodes
                .iter()
                .filter(|(_, s)| s.held.contains_key(key))
                .map(|(n, _)| n.clone())
                .collect::<BTreeSet<_>>()
        };
        let mut nodes = match event {
            CacheEvent::Relisted => {
                if self.ready {
                    self.validate_all();
                }
                return self.nodes.keys().cloned().collect();
            }
            CacheEvent::Node(_) => return BTreeSet::new(),
            CacheEvent::Device { key, node } => {
                let mut nodes = holding(key);
                nodes.extend(node.clone());
                if self.ready {
                    match self.caches.get(key) {
                        Some(device) => self.validate(&device),
                        None => self.reported.forget(key),
                    }
                }
                nodes
            }
            CacheEvent::Model(key) => {
                let mut nodes = holding(key);
                for device in self.users_of(key) {
                    if let Some(bound) = desired::node_name(&device) {
                        nodes.insert(bound.to_owned());
                    }
                    if self.ready {
                        self.validate(&device);
                    }
                }
                nodes
            }
        };
        nodes.retain(|n| self.nodes.contains_key(n));
        nodes
    }

    /// The Devices that reference the model `key`.
    fn users_of(&self, key: &ResourceKey) -> Vec<Arc<DynamicObject>> {
        self.caches.devices.state_filter(|d| {
            d.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                && desired::model_name(d) == Some(key.name.as_str())
        })
    }

    /// Validates every cached Device.
    fn validate_all(&mut self) {
        for device in self.caches.devices.state() {
            self.validate(&device);
        }
    }

    /// Validates `device` against its model and queues a report of a new problem.
    fn validate(&mut self, device: &DynamicObject) {
        let key = desired::device_key(device);
        let model = desired::model_key(device).and_then(|k| self.caches.get(&k));
        let outcome = desired::validate(device, model.as_deref());
        let Some(report) = self
            .reported
            .check(&key, device, outcome.as_ref().map(|_| ()))
        else {
            return;
        };
        if self.reports.try_send(report).is_err() {
            warn!(device = %key, "event queue full; the problem is reported at the next change");
            self.reported.forget(&key);
        }
    }

    /// Sends `node` what it misses, on the link holding its session. Returns `false` when
    /// shutdown began. When that link ended meanwhile, the rest is dropped (the dispatcher
    /// reports the node disconnected next; its reconnect resyncs it).
    async fn sync(&mut self, node: &str, shutdown: &CancellationToken) -> bool {
        let (Some(state), Some(link)) = (self.nodes.get_mut(node), self.links.get(node)) else {
            return true;
        };
        let caches = &self.caches;
        let wanted = desired::desired(caches.devices_on(node), |key| caches.get(key));
        for (key, problem) in &wanted.refused {
            debug!(node = %node, device = %key, reason = problem.reason(), "device left out");
        }
        let messages = state.plan(node, &wanted.objects);
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
