//! The messages that carry objects down: `update`, `delete` and the `resync` marker
//! (docs/protocol.md, "Messages" and "Resync by inventory").

use serde_json::json;
use verge_core::{Group, NodeResource, Operation, ResourceKey, ResourceType};
use verge_proto::Message;

use crate::cache::Cached;
use crate::upstream::SOURCE;

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

/// `resync node/<node>/_/node/<node>` with content `{"updates": n, "deletes": n}`: the end
/// of a node's resync, sent after the messages of its inventory diff.
pub fn resync_message(node: &str, updates: usize, deletes: usize) -> Message {
    let content = json!({ "updates": updates, "deletes": deletes });
    Message::build(
        uuid::Uuid::new_v4().to_string(),
        SOURCE,
        Group::Resource,
        Operation::Resync,
        NodeResource::new(node, ResourceKey::cluster(ResourceType::Node, node)).to_string(),
        content.to_string().into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use verge_proto::MessageExt;

    use super::*;

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

    #[test]
    fn resync_marker_names_the_node() {
        let m = resync_message("edge-1", 2, 1);
        assert_eq!(m.resource(), "node/edge-1/_/node/edge-1");
        assert_eq!(m.operation(), Ok(Operation::Resync));
        assert_eq!(m.group(), Ok(Group::Resource));
        assert_eq!(m.route.as_ref().map(|r| r.source.as_str()), Some(SOURCE));
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body, json!({ "updates": 2, "deletes": 1 }));
    }
}
