//! Per-node knowledge of what was sent, and the messages that carry objects down.
//!
//! [`NodeState::held`] starts as the node's inventory and is updated optimistically with every
//! message sent; a `DeliveryError` from cloudhub or an `error` answer from the edge makes it
//! forget that message's object again, so the next change or resync sends it once more.

use std::collections::{BTreeMap, HashMap};

use verge_core::{Group, NodeResource, Operation, ResourceKey};
use verge_proto::{Inventory, Message, MessageExt};

use crate::cache::{Cached, Caches};
use crate::desired::{self, Diff, Version, Versions};
use crate::upstream::SOURCE;

/// Messages remembered per node for delivery errors; older ones are forgotten beyond this.
const MAX_IN_FLIGHT: usize = 4096;

/// What one downstream message carried.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    /// An `update` of the key.
    Update(ResourceKey),
    /// A `delete` of the key at the uid.
    Delete(ResourceKey, String),
}

/// What a connected node holds, as far as this controller knows.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Managed objects the node holds (inventory plus everything sent since).
    pub held: Versions,
    /// Unanswered messages by id.
    in_flight: HashMap<String, Sent>,
}

impl NodeState {
    /// The state of a node that just connected with `inventory`.
    pub fn from_inventory(inventory: &Inventory) -> Self {
        Self {
            held: desired::held_from_inventory(inventory),
            in_flight: HashMap::new(),
        }
    }

    /// Computes what `node` misses from `caches` and returns the messages to send, in order:
    /// configmaps and secrets before the pods that use them, pod deletes before those of the
    /// configmaps and secrets they used. Records them as held.
    pub fn plan(&mut self, node: &str, caches: &Caches) -> Vec<Message> {
        let wanted = desired_objects(node, caches);
        let versions: Versions = wanted
            .iter()
            .map(|(key, object)| (key.clone(), object.version()))
            .collect();
        let Diff {
            mut updates,
            mut deletes,
        } = desired::diff(&versions, &self.held);
        updates.sort_by_key(|key| std::cmp::Reverse(key.kind));
        deletes.sort_by_key(|(key, _)| key.kind);
        if self.in_flight.len() + updates.len() + deletes.len() > MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        let mut messages = Vec::with_capacity(updates.len() + deletes.len());
        for key in updates {
            let Some(object) = wanted.get(&key) else {
                continue;
            };
            let message = update_message(node, &key, object);
            self.held.insert(key.clone(), object.version());
            self.in_flight
                .insert(message.id().to_owned(), Sent::Update(key));
            messages.push(message);
        }
        for (key, uid) in deletes {
            let message = delete_message(node, &key, &uid);
            self.held.remove(&key);
            self.in_flight
                .insert(message.id().to_owned(), Sent::Delete(key, uid));
            messages.push(message);
        }
        messages
    }

    /// The edge acknowledged message `id`.
    pub fn answered(&mut self, id: &str) {
        self.in_flight.remove(id);
    }

    /// Message `id` was not delivered or not applied: forget its effect, so that the next
    /// change or resync sends it again. Returns whether the id was known.
    pub fn failed(&mut self, id: &str) -> bool {
        match self.in_flight.remove(id) {
            Some(Sent::Update(key)) => {
                self.held.remove(&key);
                true
            }
            Some(Sent::Delete(key, uid)) => {
                // The node may still hold it, at an unknown version.
                self.held
                    .entry(key)
                    .or_insert_with(|| Version::new(uid, ""));
                true
            }
            None => false,
        }
    }
}

/// The objects `node` should hold, from the caches: its pods and the configmaps and secrets
/// they reference that exist.
pub fn desired_objects(node: &str, caches: &Caches) -> BTreeMap<ResourceKey, Cached> {
    let mut out = BTreeMap::new();
    for pod in caches.pods_on(node) {
        for key in desired::references(&pod) {
            if let Some(object) = caches.get(&key) {
                out.insert(key, object);
            }
        }
        out.insert(desired::pod_key(&pod), Cached::Pod(pod));
    }
    out
}

/// `update node/<node>/<ns>/<type>/<name>` with the object JSON and header uid and
/// resourceVersion.
pub fn update_message(node: &str, key: &ResourceKey, object: &Cached) -> Message {
    let version = object.version();
    Message::build(
        uuid::Uuid::new_v4().to_string(),
        SOURCE,
        Group::Resource,
        Operation::Update,
        NodeResource::new(node, key.clone()).to_string(),
        object.to_json(),
    )
    .with_object(version.uid, version.resource_version)
}

/// `delete node/<node>/<ns>/<type>/<name>`, empty content, header uid.
pub fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Message {
    Message::build(
        uuid::Uuid::new_v4().to_string(),
        SOURCE,
        Group::Resource,
        Operation::Delete,
        NodeResource::new(node, key.clone()).to_string(),
        Vec::new(),
    )
    .with_object(uid, "")
}

#[cfg(test)]
mod tests {
    use verge_core::ResourceType;

    use super::*;

    #[test]
    fn failures_forget_what_was_sent() {
        let key = ResourceKey::new("ns", ResourceType::ConfigMap, "c");
        let mut state = NodeState::default();
        state.held.insert(key.clone(), Version::new("u", "2"));
        state
            .in_flight
            .insert("m-1".into(), Sent::Update(key.clone()));
        assert!(state.failed("m-1"));
        assert!(state.held.is_empty());
        assert!(!state.failed("m-1"));
        state
            .in_flight
            .insert("m-2".into(), Sent::Delete(key.clone(), "u".into()));
        assert!(state.failed("m-2"));
        assert_eq!(state.held.get(&key), Some(&Version::new("u", "")));
        state.in_flight.insert("m-3".into(), Sent::Update(key));
        state.answered("m-3");
        assert!(state.in_flight.is_empty());
    }

    #[test]
    fn messages_carry_path_and_version() {
        let key = ResourceKey::new("ns", ResourceType::Pod, "p");
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "9" }
        }))
        .expect("pod");
        let m = update_message("edge-1", &key, &Cached::Pod(pod.into()));
        assert_eq!(m.resource(), "node/edge-1/ns/pod/p");
        assert_eq!(m.operation(), Ok(Operation::Update));
        let header = m.header.clone().expect("header");
        assert_eq!(
            (header.uid.as_str(), header.resource_version.as_str()),
            ("u", "9")
        );
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body["kind"], "Pod");
        let d = delete_message("edge-1", &key, "u");
        assert_eq!(d.operation(), Ok(Operation::Delete));
        assert!(d.content.is_empty());
        assert_eq!(d.header.expect("header").uid, "u");
    }
}
