//! The messages that carry Devices and DeviceModels down (group `device`): `update`,
//! `delete` and the `resync` marker (docs/protocol.md, "Messages" and "Resync by
//! inventory").

use kube::api::{DynamicObject, TypeMeta};
use serde_json::json;
use verge_controller::diff::Version;
use verge_core::{Envelope, Group, Kind, Module, ObjectVersion, ResourceKey, ResourceType, Write};

/// The object's uid and resourceVersion.
pub fn version(object: &DynamicObject) -> Version {
    Version::of(&object.metadata)
}

/// The object's JSON as the API server returns it, with `apiVersion` and `kind` (filled in
/// from the key when the watch left them out).
pub fn to_json(key: &ResourceKey, object: &DynamicObject) -> Vec<u8> {
    let mut object = object.clone();
    if object.types.is_none() {
        let kind = match key.kind {
            ResourceType::DeviceModel => "DeviceModel",
            _ => "Device",
        };
        object.types = Some(TypeMeta {
            api_version: verge_device_api::API_VERSION.to_owned(),
            kind: kind.to_owned(),
        });
    }
    // Serializing a DynamicObject (a JSON value with metadata) cannot fail.
    serde_json::to_vec(&object).unwrap_or_default()
}

/// `update node/<node>/<ns>/<device|devicemodel>/<name>` with the object's JSON and header
/// uid and resourceVersion.
pub fn update_message(node: &str, key: &ResourceKey, object: &DynamicObject) -> Envelope {
    let v = version(object);
    let kind = Kind::Upsert {
        write: Write::Update,
        key: key.clone(),
        version: ObjectVersion::new(v.uid, v.resource_version),
    };
    Envelope::new(
        Module::DeviceController,
        Group::Device,
        kind,
        to_json(key, object),
    )
    .at_node(node)
}

/// `delete node/<node>/<ns>/<device|devicemodel>/<name>`, empty content, header uid.
pub fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope {
    let kind = Kind::Delete {
        key: key.clone(),
        version: ObjectVersion::uid(uid),
    };
    Envelope::new(Module::DeviceController, Group::Device, kind, Vec::new()).at_node(node)
}

/// The key of the device resync marker: `_/device/<node>`. It is not edgecontroller's
/// `_/node/<node>`, because cloudhub keys its delivery queue by path and lets a newer
/// message replace a waiting one of the same key: a shared key would let one controller's
/// marker replace the other's message.
pub fn resync_key(node: &str) -> ResourceKey {
    ResourceKey::cluster(ResourceType::Device, node)
}

/// `resync node/<node>/_/device/<node>` with content `{"updates": n, "deletes": n}`: the end
/// of a node's device resync, sent after the messages of its inventory diff.
pub fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope {
    let content = json!({ "updates": updates, "deletes": deletes });
    let kind = Kind::Resync {
        key: resync_key(node),
    };
    let body = content.to_string().into_bytes();
    Envelope::new(Module::DeviceController, Group::Device, kind, body).at_node(node)
}

#[cfg(test)]
mod tests {
    use verge_core::Operation;
    use verge_proto::{Message, MessageExt};

    use super::*;

    #[test]
    fn messages_carry_path_group_and_version() {
        let key = ResourceKey::new("ns", ResourceType::Device, "d");
        let device: DynamicObject = serde_json::from_value(json!({
            "metadata": { "name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "9" },
            "spec": { "nodeName": "edge-1", "stateReport": { "reportCycle": 5 } }
        }))
        .expect("device");
        let m = Message::from(update_message("edge-1", &key, &device));
        assert_eq!(m.resource(), "node/edge-1/ns/device/d");
        assert_eq!(m.operation(), Ok(Operation::Update));
        assert_eq!(m.group(), Ok(Group::Device));
        let header = m.header.clone().expect("header");
        assert_eq!(
            (header.uid.as_str(), header.resource_version.as_str()),
            ("u", "9")
        );
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body["kind"], "Device");
        assert_eq!(body["apiVersion"], "devices.kubeedge.io/v1beta1");
        // Fields the controller does not interpret go down unchanged.
        assert_eq!(body["spec"]["stateReport"]["reportCycle"], 5);
        let d = Message::from(delete_message("edge-1", &key, "u"));
        assert_eq!(d.operation(), Ok(Operation::Delete));
        assert!(d.content.is_empty());
        assert_eq!(d.header.expect("header").uid, "u");
    }

    #[test]
    fn resync_marker_has_its_own_key() {
        let m = Message::from(resync_message("edge-1", 2, 1));
        assert_eq!(m.resource(), "node/edge-1/_/device/edge-1");
        assert_eq!(m.operation(), Ok(Operation::Resync));
        assert_eq!(m.group(), Ok(Group::Device));
        assert_eq!(
            m.route.as_ref().map(|r| r.source.as_str()),
            Some("devicecontroller")
        );
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body, json!({ "updates": 2, "deletes": 1 }));
    }
}
