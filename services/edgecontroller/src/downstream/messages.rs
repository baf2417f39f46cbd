//! The messages that carry objects down: `update`, `delete` and the `resync` marker
//! (docs/protocol.md, "Messages" and "Resync by inventory").

use serde_json::json;
use verge_core::{Envelope, Group, Kind, Module, ObjectVersion, ResourceKey, ResourceType, Write};

use crate::cache::Cached;

/// `update node/<node>/<ns>/<type>/<name>` with the object JSON and header uid and
/// resourceVersion.
pub fn update_message(node: &str, key: &ResourceKey, object: &Cached) -> Envelope {
    let version = object.version();
    let kind = Kind::Upsert {
        write: Write::Update,
        key: key.clone(),
        version: ObjectVersion::new(version.uid, version.resource_version),
    };
    Envelope::new(
        Module::EdgeController,
        Group::Resource,
        kind,
        object.to_json(),
    )
    .at_node(node)
}

/// `delete node/<node>/<ns>/<type>/<name>`, empty content, header uid.
pub fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope {
    let kind = Kind::Delete {
        key: key.clone(),
        version: ObjectVersion::uid(uid),
    };
    Envelope::new(Module::EdgeController, Group::Resource, kind, Vec::new()).at_node(node)
}

/// `resync node/<node>/_/node/<node>` with content `{"updates": n, "deletes": n}`: the end
/// of a node's resync, sent after the messages of its inventory diff.
pub fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope {
    let content = json!({ "updates": updates, "deletes": deletes });
    let kind = Kind::Resync {
        key: ResourceKey::cluster(ResourceType::Node, node),
    };
    let body = content.to_string().into_bytes();
    Envelope::new(Module::EdgeController, Group::Resource, kind, body).at_node(node)
}

#[cfg(test)]
mod tests {
    use verge_core::Operation;
    use verge_proto::{Message, MessageExt};

    use super::*;
    use crate::upstream::SOURCE;

    #[test]
    fn messages_carry_path_and_version() {
        let key = ResourceKey::new("ns", ResourceType::Pod, "p");
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "9" }
        }))
        .expect("pod");
        let m = Message::from(update_message("edge-1", &key, &Cached::Pod(pod.into())));
        assert_eq!(m.resource(), "node/edge-1/ns/pod/p");
        assert_eq!(m.operation(), Ok(Operation::Update));
        let header = m.header.clone().expect("header");
        assert_eq!(
            (header.uid.as_str(), header.resource_version.as_str()),
            ("u", "9")
        );
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body["kind"], "Pod");
        let d = Message::from(delete_message("edge-1", &key, "u"));
        assert_eq!(d.operation(), Ok(Operation::Delete));
        assert!(d.content.is_empty());
        assert_eq!(d.header.expect("header").uid, "u");
    }

    #[test]
    fn resync_marker_names_the_node() {
        let m = Message::from(resync_message("edge-1", 2, 1));
        assert_eq!(m.resource(), "node/edge-1/_/node/edge-1");
        assert_eq!(m.operation(), Ok(Operation::Resync));
        assert_eq!(m.group(), Ok(Group::Resource));
        assert_eq!(m.route.as_ref().map(|r| r.source.as_str()), Some(SOURCE));
        let body: serde_json::Value = serde_json::from_slice(&m.content).expect("json");
        assert_eq!(body, json!({ "updates": 2, "deletes": 1 }));
    }
}
