//! Unit tests of message classification and answers.

use serde_json::json;
use verge_core::{Group, Operation};
use verge_proto::{Message, MessageExt};

use super::*;

/// As the hub link reads a message, then [`super::parse`].
fn parse(node: &str, message: &Message) -> Result<Inbound> {
    super::parse(node, &Envelope::try_from(message.clone())?)
}

fn msg(op: Operation, resource: &str, content: serde_json::Value) -> Message {
    Message::build(
        "m-1",
        "edged",
        Group::Resource,
        op,
        resource,
        content.to_string().into_bytes(),
    )
}

fn node_json(name: &str) -> serde_json::Value {
    json!({ "metadata": { "name": name, "labels": { "node-role.kubernetes.io/edge": "" } },
            "spec": { "taints": [{ "key": "k", "effect": "NoSchedule" }] } })
}

#[test]
fn node_insert_parses() {
    let m = msg(
        Operation::Insert,
        "node/edge-1/_/node/edge-1",
        node_json("edge-1"),
    );
    let Ok(Inbound::Request(Request::RegisterNode(node))) = parse("edge-1", &m) else {
        panic!("expected a registration");
    };
    assert_eq!(node.metadata.name.as_deref(), Some("edge-1"));
}

#[test]
fn other_nodes_objects_are_forbidden() {
    let cases = [
        // Path of another node.
        msg(
            Operation::Insert,
            "node/edge-2/_/node/edge-2",
            node_json("edge-2"),
        ),
        // Own path, another node's name.
        msg(
            Operation::Insert,
            "node/edge-1/_/node/edge-2",
            node_json("edge-2"),
        ),
        // Own path and name, object of another node.
        msg(
            Operation::Insert,
            "node/edge-1/_/node/edge-1",
            node_json("edge-2"),
        ),
        // Node object in a namespace.
        msg(
            Operation::Insert,
            "node/edge-1/default/node/edge-1",
            node_json("edge-1"),
        ),
        msg(
            Operation::Update,
            "node/edge-1/_/nodestatus/edge-2",
            json!({}),
        ),
        msg(
            Operation::Update,
            "node/edge-1/kube-node-lease/lease/edge-2",
            json!({}),
        ),
        msg(
            Operation::Update,
            "node/edge-1/default/lease/edge-1",
            json!({}),
        ),
        msg(
            Operation::Update,
            "node/edge-1/kube-node-lease/lease/edge-1",
            json!({ "metadata": { "name": "edge-2" } }),
        ),
    ];
    for m in cases {
        let result = parse("edge-1", &m);
        assert!(
            matches!(result, Err(Error::Forbidden { .. })),
            "{}: {result:?}",
            m.resource()
        );
    }
}

#[test]
fn status_and_lease_parse() {
    let m = msg(
        Operation::Update,
        "node/edge-1/_/nodestatus/edge-1",
        json!({ "conditions": [{ "type": "Ready", "status": "True" }] }),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::NodeStatus(_)))
    ));
    let m = msg(
        Operation::Update,
        "node/edge-1/kube-node-lease/lease/edge-1",
        json!({ "spec": { "holderIdentity": "edge-1" } }),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::RenewLease(_)))
    ));
}

#[test]
fn bad_content_and_unknown_types_are_errors() {
    let mut m = msg(Operation::Insert, "node/edge-1/_/node/edge-1", json!({}));
    m.content = b"not json".to_vec();
    assert!(matches!(parse("edge-1", &m), Err(Error::Decode { .. })));
    let m = msg(Operation::Update, "node/edge-1/default/pod/p", json!({}));
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
    let m = msg(
        Operation::Insert,
        "node/edge-1/_/nodestatus/edge-1",
        json!({}),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
    let m = msg(Operation::Insert, "edge-1/_/node/edge-1", json!({}));
    assert!(matches!(parse("edge-1", &m), Err(Error::Route(_))));
    let m = Message::build(
        "m",
        "x",
        Group::Device,
        Operation::Update,
        "node/edge-1/_/node/edge-1",
        vec![],
    );
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn answers_from_the_edge_are_not_requests() {
    let m = Message::reply(
        "a",
        "down-1",
        "metamanager",
        Group::Resource,
        Operation::Ack,
        "",
        vec![],
    );
    assert_eq!(
        parse("edge-1", &m).expect("answer"),
        Inbound::Answer {
            operation: Operation::Ack,
            parent_id: "down-1".into()
        }
    );
}

#[test]
fn answer_names_the_parent() {
    let m = msg(
        Operation::Update,
        "node/edge-1/_/nodestatus/edge-1",
        json!({}),
    );
    let envelope = Envelope::try_from(m.clone()).expect("valid");
    let a = Message::from(answer(&envelope, Outcome::Error("why".into()), Vec::new()));
    assert_eq!(a.parent_id(), "m-1");
    assert_ne!(a.id(), "m-1");
    assert_eq!(a.operation(), Ok(Operation::Error));
    assert_eq!(a.group(), Ok(Group::Resource));
    assert_eq!(a.resource(), m.resource());
    assert_eq!(a.route.as_ref().map(|r| r.source.as_str()), Some(SOURCE));
    assert_eq!(a.content, b"why");
}

#[test]
fn pod_requests_parse_with_header_uid() {
    let m = msg(
        Operation::Update,
        "node/edge-1/ns/podstatus/p",
        json!({ "phase": "Running" }),
    )
    .with_object("u-1", "");
    let Ok(Inbound::Request(Request::PodStatus(pod, status))) = parse("edge-1", &m) else {
        panic!("expected a pod status");
    };
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
        ("ns", "p", "u-1")
    );
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let m = Message::build(
        "m",
        "edged",
        Group::Resource,
        Operation::Delete,
        "node/edge-1/ns/pod/p",
        vec![],
    )
    .with_object("u-1", "");
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::DeletePod(PodRef { ref uid, .. }))) if uid == "u-1"
    ));
    // Cluster-scoped pod paths are refused.
    let m = msg(Operation::Update, "node/edge-1/_/podstatus/p", json!({}));
    assert!(matches!(parse("edge-1", &m), Err(Error::Forbidden { .. })));
}

#[test]
fn events_queries_and_tokens_parse() {
    let m = msg(
        Operation::Insert,
        "node/edge-1/ns/event/e1",
        json!({ "reason": "Started", "involvedObject": { "kind": "Pod", "name": "p" } }),
    );
    let Ok(Inbound::Request(Request::CreateEvent(event))) = parse("edge-1", &m) else {
        panic!("expected an event");
    };
    assert_eq!(event.metadata.namespace.as_deref(), Some("ns"));
    let m = msg(
        Operation::Insert,
        "node/edge-1/ns/event/e1",
        json!({ "metadata": { "namespace": "kube-system" } }),
    );
    assert!(matches!(parse("edge-1", &m), Err(Error::Forbidden { .. })));
    for kind in ["configmap", "secret"] {
        let m = msg(
            Operation::Query,
            &format!("node/edge-1/ns/{kind}/c"),
            json!(null),
        );
        assert!(matches!(
            parse("edge-1", &m),
            Ok(Inbound::Request(Request::Query(ref key))) if key.name == "c"
        ));
    }
    let m = msg(
        Operation::Query,
        "node/edge-1/ns/serviceaccounttoken/default",
        json!({ "spec": { "audiences": ["api"],
            "boundObjectRef": { "kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u" } } }),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::Token { ref service_account, .. })) if service_account == "default"
    ));
    let m = msg(
        Operation::Query,
        "node/edge-1/ns/servicelist/_",
        json!(null),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::ServiceList(ref ns))) if ns == "ns"
    ));
    // A service list names no object; cluster-scoped lists do not exist.
    let m = msg(
        Operation::Query,
        "node/edge-1/ns/servicelist/x",
        json!(null),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
    let m = msg(Operation::Query, "node/edge-1/_/servicelist/_", json!(null));
    assert!(matches!(parse("edge-1", &m), Err(Error::Forbidden { .. })));
    // Queries of other types, and writes of configmaps, are not served.
    let m = msg(Operation::Query, "node/edge-1/ns/pod/p", json!(null));
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn trust_bundle_queries_parse() {
    let m = msg(
        Operation::Query,
        "node/edge-1/_/clustertrustbundle/root",
        json!(null),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::TrustBundles(trust_bundles::Query::Name(ref n)))) if n == "root"
    ));
    let m = msg(
        Operation::Query,
        "node/edge-1/_/clustertrustbundlelist/example.com:signer",
        json!(null),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Ok(Inbound::Request(Request::TrustBundles(trust_bundles::Query::Signer(ref s))))
            if s == "example.com/signer"
    ));
    // Bundles are cluster-scoped; a list names a signer; only queries are served.
    let m = msg(
        Operation::Query,
        "node/edge-1/ns/clustertrustbundle/root",
        json!(null),
    );
    assert!(matches!(parse("edge-1", &m), Err(Error::Forbidden { .. })));
    let m = msg(
        Operation::Query,
        "node/edge-1/_/clustertrustbundlelist/_",
        json!(null),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
    let m = msg(
        Operation::Update,
        "node/edge-1/_/clustertrustbundle/root",
        json!({}),
    );
    assert!(matches!(
        parse("edge-1", &m),
        Err(Error::Unsupported { .. })
    ));
    // Another node's path is refused before anything is read.
    let m = msg(
        Operation::Query,
        "node/edge-2/_/clustertrustbundle/root",
        json!(null),
    );
    assert!(matches!(parse("edge-1", &m), Err(Error::Forbidden { .. })));
}
