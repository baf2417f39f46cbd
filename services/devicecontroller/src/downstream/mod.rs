//! Downstream: each connected edge node's Devices and the DeviceModels they use, sent to it;
//! and the Warning events of Devices that cannot be sent.
//!
//! The task ([`run`]) is the shared one ([`verge_controller::downstream`]: sessions,
//! answers, delivery errors and their re-diffs after a backoff, resync by inventory (types
//! `device` and `devicemodel` only) with the `resync` marker). What is devicecontroller's
//! own: which connected nodes a [`CacheEvent`] concerns, and what each should hold
//! ([`desired::desired`], sent as group `device`). A Device moved to another node is
//! deleted on the old one and sent to the new one; a deleted Device is deleted on its node.
//!
//! Every Device whose content or model changed is validated; a problem is reported once
//! per Device ([`Reported`]) to the event task ([`crate::problems`]).
//!
//! - [`sender`]: what devicecontroller sends ([`DeviceObjects`]).
//! - [`messages`]: construction of `update`, `delete` and `resync` messages.

pub mod messages;
pub mod sender;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::api::DynamicObject;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use verge_controller::dispatch::Input;
use verge_controller::downstream::{self, Downstream, Nodes};
use verge_core::ResourceKey;

use crate::cache::{CacheEvent, Caches};
use crate::desired;
use crate::problems::{Report, Reported};
pub use sender::{Contents, DeviceObjects, NodeState};

/// What is devicecontroller's own in the downstream task: its caches and the Device
/// problems reported so far.
struct DeviceDownstream {
    caches: Caches,
    reported: Reported,
    reports: mpsc::Sender<Report>,
}

/// Runs the downstream side until `shutdown` or until both input channels closed; Device
/// problems go to `reports` ([`verge_controller::downstream::run`]).
pub async fn run(
    caches: Caches,
    inputs: mpsc::UnboundedReceiver<Input>,
    events: mpsc::Receiver<CacheEvent>,
    reports: mpsc::Sender<Report>,
    shutdown: CancellationToken,
) {
    let waiter = caches.clone();
    let controller = DeviceDownstream {
        caches,
        reported: Reported::default(),
        reports,
    };
    downstream::run(controller, waiter.wait_ready(), inputs, events, shutdown).await;
}

impl Downstream for DeviceDownstream {
    type Objects = DeviceObjects;
    type Event = CacheEvent;

    fn on_ready(&mut self) {
        self.validate_all();
    }

    fn is_node(&self, node: &str) -> bool {
        self.caches.is_edge_node(node)
    }

    /// Validates what a cache change touched and returns the connected nodes it concerns.
    fn on_cache(
        &mut self,
        event: &CacheEvent,
        nodes: &mut Nodes<DeviceObjects>,
        ready: bool,
    ) -> BTreeSet<String> {
        match event {
            CacheEvent::Relisted => {
                if ready {
                    self.validate_all();
                }
                nodes.names()
            }
            CacheEvent::Node(_) => BTreeSet::new(),
            CacheEvent::Device { key, node } => {
                let mut concerned = nodes.holding(key);
                concerned.extend(node.clone());
                if ready {
                    match self.caches.get(key) {
                        Some(device) => self.validate(&device),
                        None => self.reported.forget(key),
                    }
                }
                concerned
            }
            CacheEvent::Model(key) => {
                let mut concerned = nodes.holding(key);
                for device in self.users_of(key) {
                    if let Some(bound) = desired::node_name(&device) {
                        concerned.insert(bound.to_owned());
                    }
                    if ready {
                        self.validate(&device);
                    }
                }
                concerned
            }
        }
    }

    fn desired(&mut self, node: &str) -> BTreeMap<ResourceKey, Arc<DynamicObject>> {
        let caches = &self.caches;
        let wanted = desired::desired(caches.devices_on(node), |key| caches.get(key));
        for (key, problem) in &wanted.refused {
            debug!(node = %node, device = %key, reason = problem.reason(), "device left out");
        }
        wanted.objects
    }
}

impl DeviceDownstream {
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
}
