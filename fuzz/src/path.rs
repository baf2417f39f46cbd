//! Target `resource_path`: text → the parsers of verge-core (resource keys edge-side and
//! cloud-side, resource types, operations, groups, modules, message ids, resourceVersion
//! comparison), the node-name rules of cloudhub and verge-pki, and cloudhub's routing rules
//! (the `node/<node>/` prefix added upstream, checked and stripped downstream).
//!
//! Input: UTF-8 text. Every line, and the whole text, goes through the single-string
//! parsers. With three lines or more, `<operation>\n<node>\n<resource>[\n...]` is also read
//! as a wire message from `<node>`'s edge (and, with `<node>` as `Routed.node`, from a
//! controller) and routed.
//!
//! Properties: every parser that accepts a string prints it back unchanged; cloudhub's and
//! verge-pki's node-name rules agree; a valid node name is a valid resource path segment; a
//! resourceVersion is never newer than itself; routing upstream then downstream is the
//! identity, and both directions produce paths the other side parses.

use std::str::FromStr;

use verge_core::{
    Envelope, Group, MessageId, Module, NodeResource, Operation, ResourceKey, ResourceType,
    is_newer,
};
use verge_proto::{Header, Message, Route};

/// Checks `data` when it is UTF-8.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    single(text);
    let lines: Vec<&str> = text.split('\n').collect();
    for line in &lines {
        single(line);
    }
    if let [a, b, ..] = lines.as_slice() {
        versions(a, b);
    }
    if let [operation, node, resource, ..] = lines.as_slice() {
        routed(operation, node, resource);
    }
}

/// The single-string parsers on `s`.
fn single(s: &str) {
    round_trip::<ResourceKey>(s);
    round_trip::<NodeResource>(s);
    round_trip::<ResourceType>(s);
    round_trip::<Operation>(s);
    round_trip::<Group>(s);
    round_trip::<Module>(s);
    round_trip::<MessageId>(s);
    node_name(s);
    versions(s, s);
}

/// `s.parse::<T>()`, when it succeeds, prints back as `s`.
fn round_trip<T: FromStr + ToString>(s: &str) {
    if let Ok(parsed) = s.parse::<T>() {
        assert_eq!(
            parsed.to_string(),
            s,
            "{} round trip",
            std::any::type_name::<T>()
        );
    }
}

/// cloudhub (hello) and verge-pki (CSR subject, peer certificate) agree on node names, and a
/// valid node name fits in a resource path.
pub fn node_name(name: &str) {
    let hub = verge_cloudhub::validate_node_name(name).is_ok();
    let pki = verge_pki::validate_node_name(name).is_ok();
    assert_eq!(
        hub, pki,
        "node name {name:?}: cloudhub {hub}, verge-pki {pki}"
    );
    let common_name = format!("{}{name}", verge_pki::NODE_USER_PREFIX);
    let from_cn = verge_pki::node::node_name_from_common_name(&common_name);
    assert_eq!(from_cn.is_ok(), pki, "node name from {common_name:?}");
    if hub {
        let path = format!("node/{name}/_/node/{name}");
        let parsed: NodeResource = path.parse().expect("a node's own key parses");
        assert_eq!(parsed.node, name);
    }
}

/// resourceVersion comparison: irreflexive (except against the empty stored version) and,
/// for integers, antisymmetric.
fn versions(a: &str, b: &str) {
    if !b.is_empty() {
        assert!(!is_newer(b, b), "{b:?} newer than itself");
    }
    if a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok() {
        assert!(
            !(is_newer(a, b) && is_newer(b, a)),
            "{a:?} and {b:?} both newer"
        );
    }
}

/// A wire message `operation` of `resource`, answering `p-1`.
fn wire(operation: &str, resource: &str) -> Message {
    Message {
        header: Some(Header {
            id: "m-1".to_owned(),
            parent_id: "p-1".to_owned(),
            ..Header::default()
        }),
        route: Some(Route {
            source: "edged".to_owned(),
            group: "resource".to_owned(),
            operation: operation.to_owned(),
            resource: resource.to_owned(),
        }),
        content: Vec::new(),
        trace_context: None,
    }
}

/// The message read from `node`'s edge and, separately, routed by a controller to `node`.
fn routed(operation: &str, node: &str, resource: &str) {
    let Some(envelope) = crate::message::read(wire(operation, resource)) else {
        return;
    };
    if verge_cloudhub::validate_node_name(node).is_ok() {
        route_upstream(node, envelope.clone());
    }
    route_downstream(node, envelope);
}

/// cloudhub's upstream rule for a message from `node`'s session (`node` is valid, as
/// cloudhub checked it in the hello).
pub fn route_upstream(node: &str, envelope: Envelope) {
    let original = envelope.clone();
    let mut forwarded = envelope;
    let Ok(group) = verge_cloudhub::fuzzing::upstream(node, &mut forwarded) else {
        assert!(original.node.is_some(), "only a cloud-side path is refused");
        return;
    };
    assert!(
        original.node.is_none(),
        "a cloud-side path is never forwarded"
    );
    let Some(group) = group else {
        return;
    };
    assert_eq!(group, original.group);
    if let Some(key) = original.key() {
        assert_eq!(forwarded.path(), format!("node/{node}/{key}"));
    }
    // The controller reads it as cloudhub wrote it.
    let read = crate::message::read(Message::from(forwarded.clone()))
        .expect("a forwarded message reads at the controller");
    assert_eq!(read, crate::message::normalised(forwarded.clone()));
    // Sent back down to the same node, the path is the edge's again.
    let back = verge_cloudhub::fuzzing::downstream(node, forwarded)
        .expect("what was forwarded from a node routes back to it");
    assert_eq!(back, original, "upstream then downstream is the identity");
}

/// cloudhub's downstream rule for a message a controller routed to `node`.
pub fn route_downstream(node: &str, envelope: Envelope) {
    let original = envelope.clone();
    let Ok(queued) = verge_cloudhub::fuzzing::downstream(node, envelope) else {
        return;
    };
    assert!(queued.node.is_none(), "queued messages are edge-side");
    assert!(!node.is_empty());
    if original.key().is_some() {
        assert_eq!(original.node.as_deref(), Some(node), "only the node's own");
    }
    assert_eq!(queued.key(), original.key());
    // The edge reads it as cloudhub wrote it.
    let read = crate::message::read(Message::from(queued.clone()))
        .expect("a queued message reads at the edge");
    assert_eq!(read, queued);
}
