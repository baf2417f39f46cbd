//! What edgecontroller sends down, over the shared per-node bookkeeping
//! ([`verge_controller::sender`]: held versions, content fingerprints so status-only changes
//! are not echoed, answered/failed messages, the pending `resync` marker).
//!
//! [`EdgeObjects`] is what is edgecontroller's own: the node's own Node object and the
//! `resync` marker share one cloudhub delivery key (`_/node/<node>`), so at most one message
//! of that key is unanswered at a time (a Node update or delete, or the marker, waits until
//! the previous one was answered or failed; [`NodeState::answered`] tells the caller to plan
//! again); [`desired_objects`] are the node's Node object, its pods and the configmaps and
//! secrets they use, and every Service and EndpointSlice.

use std::collections::BTreeMap;

use verge_controller::sender::{self, NodeObjects};
use verge_core::{Envelope, ResourceKey, ResourceType};
use verge_proto::Inventory;

use super::messages::{delete_message, resync_message, update_message};
use crate::cache::{Cached, Caches};
use crate::desired::{self, Version, Versions};
use crate::fingerprint::Fingerprint;

pub use verge_controller::sender::Contents;

/// What a connected node holds, as far as this controller knows
/// ([`verge_controller::sender::NodeState`] over [`EdgeObjects`]).
pub type NodeState = sender::NodeState<EdgeObjects>;

/// What edgecontroller sends down: the node's own Node object (sharing the `resync`
/// marker's delivery key `_/node/<node>`), configmaps and secrets before the pods that use
/// them, pod deletes before those of the configmaps and secrets they used.
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeObjects;

impl NodeObjects for EdgeObjects {
    type Object = Cached;

    fn version(object: &Cached) -> Version {
        object.version()
    }

    fn fingerprint(object: &Cached) -> Fingerprint {
        object.fingerprint()
    }

    fn is_managed(kind: ResourceType) -> bool {
        desired::is_managed(kind)
    }

    fn held_from_inventory(node: &str, inventory: &Inventory) -> Versions {
        desired::held_from_inventory(node, inventory)
    }

    fn own_key(node: &str) -> Option<ResourceKey> {
        Some(desired::node_key(node))
    }

    fn order(updates: &mut [ResourceKey], deletes: &mut [(ResourceKey, String)]) {
        updates.sort_by_key(|key| std::cmp::Reverse(key.kind));
        deletes.sort_by_key(|(key, _)| key.kind);
    }

    fn update_message(node: &str, key: &ResourceKey, object: &Cached) -> Envelope {
        update_message(node, key, object)
    }

    fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope {
        delete_message(node, key, uid)
    }

    fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope {
        resync_message(node, updates, deletes)
    }
}

/// The objects `node` should hold, from the caches: its own Node object (when it is a known
/// edge node), its pods and the configmaps and secrets they reference that exist, its site
/// peers' trimmed Nodes, and every Service and EndpointSlice.
pub fn desired_objects(node: &str, caches: &Caches) -> BTreeMap<ResourceKey, Cached> {
    let mut out = BTreeMap::new();
    let own = desired::node_key(node);
    if let Some(object) = caches.get(&own) {
        out.insert(own, object);
    }
    for pod in caches.pods_on(node) {
        for key in desired::references(&pod) {
            if let Some(object) = caches.get(&key) {
                out.insert(key, object);
            }
        }
        out.insert(desired::pod_key(&pod), Cached::Pod(pod));
    }
    for peer in crate::site::peers(node, caches.nodes.state().iter()) {
        let key = desired::node_key(peer.metadata.name.as_deref().unwrap_or_default());
        out.insert(key, Cached::SitePeer(std::sync::Arc::new(peer)));
    }
    for service in caches.services.state() {
        let key = key_of(service.as_ref(), ResourceType::Service);
        out.insert(key, Cached::Service(service));
    }
    for slice in caches.endpointslices.state() {
        let key = key_of(slice.as_ref(), ResourceType::EndpointSlice);
        out.insert(key, Cached::EndpointSlice(slice));
    }
    out
}

/// The key of a namespaced object of type `kind`.
fn key_of<K: kube::Resource>(object: &K, kind: ResourceType) -> ResourceKey {
    let meta = object.meta();
    ResourceKey::new(
        meta.namespace.as_deref().unwrap_or("default"),
        kind,
        meta.name.as_deref().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests;
