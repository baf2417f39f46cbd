//! What devicecontroller sends down, over the shared per-node bookkeeping
//! ([`verge_controller::sender`], the same as edgecontroller's): held versions (the node's
//! inventory of types `device` and `devicemodel`, then everything sent since), content
//! fingerprints (only `status`, `resourceVersion` or `managedFields` changed: not sent),
//! answered/failed messages and the pending `resync` marker.
//!
//! [`DeviceObjects`] is what is devicecontroller's own: Devices and DeviceModels, models
//! before the devices that use them, device deletes before model deletes; the `resync`
//! marker has its own key (`_/device/<node>`), one marker in flight at a time.

use std::sync::Arc;

use kube::api::DynamicObject;
use verge_controller::diff::{Version, Versions};
use verge_controller::fingerprint::Fingerprint;
use verge_controller::sender::{self, NodeObjects};
use verge_core::{Envelope, ResourceKey, ResourceType};
use verge_proto::Inventory;

use super::messages::{delete_message, resync_message, update_message, version};
use crate::desired;

pub use verge_controller::sender::Contents;

/// What a connected node holds, as far as devicecontroller knows
/// ([`verge_controller::sender::NodeState`] over [`DeviceObjects`]).
pub type NodeState = sender::NodeState<DeviceObjects>;

/// What devicecontroller sends down (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceObjects;

impl NodeObjects for DeviceObjects {
    type Object = Arc<DynamicObject>;

    fn version(object: &Arc<DynamicObject>) -> Version {
        version(object)
    }

    fn fingerprint(object: &Arc<DynamicObject>) -> Fingerprint {
        Fingerprint::of(object.as_ref())
    }

    fn is_managed(kind: ResourceType) -> bool {
        desired::is_managed(kind)
    }

    fn held_from_inventory(_node: &str, inventory: &Inventory) -> Versions {
        desired::held_from_inventory(inventory)
    }

    fn own_key(_node: &str) -> Option<ResourceKey> {
        None
    }

    fn order(updates: &mut [ResourceKey], deletes: &mut [(ResourceKey, String)]) {
        updates.sort_by_key(|key| key.kind != ResourceType::DeviceModel);
        deletes.sort_by_key(|(key, _)| key.kind == ResourceType::DeviceModel);
    }

    fn update_message(node: &str, key: &ResourceKey, object: &Arc<DynamicObject>) -> Envelope {
        update_message(node, key, object)
    }

    fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope {
        delete_message(node, key, uid)
    }

    fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope {
        resync_message(node, updates, deletes)
    }
}

#[cfg(test)]
mod tests;
