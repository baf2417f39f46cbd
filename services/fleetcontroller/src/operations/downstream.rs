//! Downstream: each connected edge node's tasks, sent to it as group `fleet`, over the shared
//! per-node bookkeeping of `verge-controller` (sessions, answers, delivery errors, resync by
//! the node's inventory of type `nodetask` with the marker `_/nodetask/_`). A node holds the
//! task of every job that is not final and lists the node `InProgress` (started by
//! [`super::progress::advance`] as `concurrency` allows); a task leaves the node (`delete`)
//! when its entry ends, the job ends or is deleted. A node offline when its task started gets
//! it when it connects, from the diff of its inventory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::runtime::reflector::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use verge_controller::diff::{self, Version, Versions};
use verge_controller::dispatch::Input;
use verge_controller::downstream::{self, Downstream, Nodes};
use verge_controller::fingerprint::Fingerprint;
use verge_controller::sender::NodeObjects;
use verge_core::{
    Envelope, Group, Kind, LIST_NAME, Module, ObjectVersion, ResourceKey, ResourceType, Write,
};
use verge_proto::Inventory;

use super::Job;
use super::cache::{JobCaches, JobEvent};
use super::credentials::Credentials;
use super::tasks::{self, TaskObject};
use crate::api::operations::{NodeEntry as _, NodeTaskPhase};

/// Runs the downstream side until `shutdown` or until both input channels closed.
pub async fn run(
    caches: JobCaches,
    credentials: Credentials,
    inputs: mpsc::UnboundedReceiver<Input>,
    events: mpsc::Receiver<JobEvent>,
    shutdown: CancellationToken,
) {
    let waiter = caches.clone();
    let controller = TaskDownstream {
        caches,
        credentials,
    };
    downstream::run(controller, waiter.wait_ready(), inputs, events, shutdown).await;
}

struct TaskDownstream {
    caches: JobCaches,
    credentials: Credentials,
}

impl TaskDownstream {
    /// Adds to `out` the task of every job in `jobs` that is not final and lists `node`
    /// `InProgress`.
    fn add<J: Job>(
        &self,
        jobs: &Store<J>,
        node: &str,
        out: &mut BTreeMap<ResourceKey, Arc<TaskObject>>,
    ) {
        for job in jobs.state() {
            let Some(status) = job.status() else {
                continue;
            };
            let started = !status.phase.is_final()
                && status.node_status.iter().any(|e| {
                    let basic = e.basic();
                    basic.node_name == node && basic.phase == NodeTaskPhase::InProgress
                });
            if !started {
                continue;
            }
            let meta = job.meta();
            let (Some(name), Some(uid), Some(task)) = (
                meta.name.as_deref(),
                meta.uid.clone(),
                job.task(&self.credentials),
            ) else {
                continue;
            };
            let (task, version) = tasks::for_node(task, meta, node);
            let name = tasks::task_name(J::KIND, name);
            let key = ResourceKey::cluster(ResourceType::NodeTask, name.to_string());
            let object = TaskObject {
                name,
                uid,
                generation: version,
                task,
            };
            out.insert(key, Arc::new(object));
        }
    }
}

impl Downstream for TaskDownstream {
    type Objects = TaskObjects;
    type Event = JobEvent;

    fn is_node(&self, node: &str) -> bool {
        self.caches.is_edge_node(node)
    }

    fn on_cache(
        &mut self,
        _event: &JobEvent,
        nodes: &mut Nodes<TaskObjects>,
        _ready: bool,
    ) -> BTreeSet<String> {
        nodes.names()
    }

    fn desired(&mut self, node: &str) -> BTreeMap<ResourceKey, Arc<TaskObject>> {
        let mut out = BTreeMap::new();
        self.add(&self.caches.upgrades, node, &mut out);
        self.add(&self.caches.prepulls, node, &mut out);
        self.add(&self.caches.configs, node, &mut out);
        out
    }
}

/// What fleetcontroller sends down: tasks (`_/nodetask/<kind>.<job>`), with their own resync
/// marker `_/nodetask/_`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskObjects;

/// The key of the task resync marker: `_/nodetask/_` (`_` is never a task name).
pub fn resync_key() -> ResourceKey {
    ResourceKey::cluster(ResourceType::NodeTask, LIST_NAME)
}

impl NodeObjects for TaskObjects {
    type Object = Arc<TaskObject>;

    fn version(object: &Arc<TaskObject>) -> Version {
        Version::new(object.uid.clone(), object.generation.clone())
    }

    fn fingerprint(object: &Arc<TaskObject>) -> Fingerprint {
        Fingerprint::of(object.as_ref())
    }

    fn is_managed(kind: ResourceType) -> bool {
        kind == ResourceType::NodeTask
    }

    fn held_from_inventory(_node: &str, inventory: &Inventory) -> Versions {
        diff::held_from_inventory(inventory, |key| {
            key.kind == ResourceType::NodeTask && key.name != LIST_NAME
        })
    }

    fn own_key(_node: &str) -> Option<ResourceKey> {
        None
    }

    fn order(_updates: &mut [ResourceKey], _deletes: &mut [(ResourceKey, String)]) {}

    fn update_message(node: &str, key: &ResourceKey, object: &Arc<TaskObject>) -> Envelope {
        let kind = Kind::Upsert {
            write: Write::Update,
            key: key.clone(),
            version: ObjectVersion::new(object.uid.clone(), object.generation.clone()),
        };
        // A task (plain strings and numbers) always serializes.
        let body = serde_json::to_vec(&object.task).unwrap_or_default();
        Envelope::new(Module::FleetController, Group::Fleet, kind, body).at_node(node)
    }

    fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope {
        let kind = Kind::Delete {
            key: key.clone(),
            version: ObjectVersion::uid(uid),
        };
        Envelope::new(Module::FleetController, Group::Fleet, kind, Vec::new()).at_node(node)
    }

    fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope {
        let body = serde_json::json!({ "updates": updates, "deletes": deletes })
            .to_string()
            .into_bytes();
        let kind = Kind::Resync { key: resync_key() };
        Envelope::new(Module::FleetController, Group::Fleet, kind, body).at_node(node)
    }
}
