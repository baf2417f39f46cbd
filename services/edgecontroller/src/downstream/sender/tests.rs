//! Unit tests of the per-node plan: resync marker, no status echo, failures.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use verge_core::{Operation, ResourceType};
use verge_proto::{InventoryEntry, Message, MessageExt};

use super::*;

fn key() -> ResourceKey {
    ResourceKey::new("ns", ResourceType::Pod, "p")
}

/// Pod `ns/p` at `rv`, with container image `image` and pod phase `phase`.
fn pod(rv: &str, image: &str, phase: &str) -> BTreeMap<ResourceKey, Cached> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv },
        "spec": { "nodeName": "edge-1", "containers": [{ "name": "c", "image": image }] },
        "status": { "phase": phase },
    }))
    .expect("pod");
    BTreeMap::from([(key(), Cached::Pod(pod.into()))])
}

fn inventory(rv: &str) -> Inventory {
    Inventory {
        entries: vec![InventoryEntry {
            r#type: "pod".into(),
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            resource_version: rv.into(),
        }],
    }
}

/// (operation, resource) of each message, and the marker's content if any.
fn summary(messages: &[Envelope]) -> (Vec<(Operation, String)>, Option<Value>) {
    let messages: Vec<Message> = messages.iter().cloned().map(Message::from).collect();
    let ops = messages
        .iter()
        .map(|m| (m.operation().expect("op"), m.resource().to_owned()))
        .collect();
    let marker = messages
        .iter()
        .find(|m| m.operation() == Ok(Operation::Resync))
        .map(|m| serde_json::from_slice(&m.content).expect("json"));
    (ops, marker)
}

#[test]
fn current_inventory_gets_only_the_marker() {
    let mut state = NodeState::connected("edge-1", &inventory("5"), Contents::default());
    let (ops, marker) = summary(&state.plan_objects("edge-1", &pod("5", "i", "Pending")));
    assert_eq!(
        ops,
        vec![(Operation::Resync, "node/edge-1/_/node/edge-1".to_owned())]
    );
    assert_eq!(marker, Some(json!({ "updates": 0, "deletes": 0 })));
    // The marker is sent once per connect.
    assert!(
        state
            .plan_objects("edge-1", &pod("5", "i", "Pending"))
            .is_empty()
    );
}

#[test]
fn marker_counts_the_resync_diff() {
    let stale = InventoryEntry {
        name: "gone".into(),
        uid: "g".into(),
        ..inventory("1").entries[0].clone()
    };
    let mut state = NodeState::connected(
        "edge-1",
        &Inventory {
            entries: vec![stale],
        },
        Contents::default(),
    );
    let (ops, marker) = summary(&state.plan_objects("edge-1", &pod("5", "i", "Pending")));
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[0].0, Operation::Update);
    assert_eq!(ops[1].0, Operation::Delete);
    assert_eq!(marker, Some(json!({ "updates": 1, "deletes": 1 })));
}

#[test]
fn status_changes_are_not_echoed() {
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    assert_eq!(
        state
            .plan_objects("edge-1", &pod("5", "i", "Pending"))
            .len(),
        2
    );
    // The edge's status report (rv 6), then another (rv 7): nothing to send.
    assert!(
        state
            .plan_objects("edge-1", &pod("6", "i", "Running"))
            .is_empty()
    );
    assert!(
        state
            .plan_objects("edge-1", &pod("7", "i", "Failed"))
            .is_empty()
    );
    assert_eq!(state.held.get(&key()), Some(&Version::new("u", "5")));
    // A spec change is sent.
    let (ops, _) = summary(&state.plan_objects("edge-1", &pod("8", "j", "Failed")));
    assert_eq!(
        ops,
        vec![(Operation::Update, "node/edge-1/ns/pod/p".to_owned())]
    );
    assert!(
        state
            .plan_objects("edge-1", &pod("9", "j", "Running"))
            .is_empty()
    );

    // Reconnect holding rv 8 while the cache moved on by status only: just the marker.
    let remembered = state.into_contents();
    let mut state = NodeState::connected("edge-1", &inventory("8"), remembered);
    let (ops, _) = summary(&state.plan_objects("edge-1", &pod("10", "j", "Pending")));
    assert_eq!(ops.len(), 1, "{ops:?}");
    // A restarted controller (no memory) resends once, then knows the content.
    let mut state = NodeState::connected("edge-1", &inventory("8"), Contents::default());
    let (ops, marker) = summary(&state.plan_objects("edge-1", &pod("10", "j", "Pending")));
    assert_eq!(ops.len(), 2);
    assert_eq!(marker, Some(json!({ "updates": 1, "deletes": 0 })));
    assert!(
        state
            .plan_objects("edge-1", &pod("11", "j", "Running"))
            .is_empty()
    );
}

#[test]
fn current_objects_get_a_fingerprint() {
    // Connected at the cache's version: a later status change is not sent.
    let mut state = NodeState::connected("edge-1", &inventory("5"), Contents::default());
    assert_eq!(
        state
            .plan_objects("edge-1", &pod("5", "i", "Pending"))
            .len(),
        1
    );
    assert_eq!(state.contents().len(), 1);
    assert!(
        state
            .plan_objects("edge-1", &pod("6", "i", "Running"))
            .is_empty()
    );
}

#[test]
fn failures_forget_what_was_sent() {
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    let messages = state.plan_objects("edge-1", &pod("5", "i", "Pending"));
    let (update, marker) = (messages[0].id.as_str(), messages[1].id.as_str());
    assert!(state.failed(update));
    assert!(state.held.is_empty() && state.contents().is_empty());
    assert!(!state.failed(update));
    // A lost marker comes again with the next plan, which also resends the pod.
    assert!(state.failed(marker));
    let (_, marker) = summary(&state.plan_objects("edge-1", &pod("6", "i", "Running")));
    assert_eq!(marker, Some(json!({ "updates": 1, "deletes": 0 })));

    // A failed delete leaves the object held, at an unknown version.
    let mut state = NodeState::connected("edge-1", &inventory("5"), Contents::default());
    let messages = state.plan_objects("edge-1", &BTreeMap::new());
    let k = key();
    assert!(!state.held.contains_key(&k));
    assert!(state.failed(messages[0].id.as_str()));
    assert_eq!(state.held.get(&k), Some(&Version::new("u", "")));
    // An answered message is no longer known.
    let messages = state.plan_objects("edge-1", &pod("6", "i", "Running"));
    state.answered(messages[0].id.as_str());
    assert!(!state.failed(messages[0].id.as_str()));
}

/// Node `edge-1` at `rv` with label `a=<label>` and a Ready condition `ready`.
fn node(rv: &str, label: &str, ready: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": "edge-1", "uid": "n", "resourceVersion": rv,
            "labels": { "node-role.kubernetes.io/edge": "", "a": label } },
        "spec": { "podCIDR": "10.0.0.0/24" },
        "status": { "conditions": [{ "type": "Ready", "status": ready }] },
    }))
    .expect("node")
}

#[test]
fn own_node_heartbeats_are_not_echoed() {
    let own = desired::node_key("edge-1");
    let wanted = |n: Node| BTreeMap::from([(own.clone(), Cached::Node(n.into()))]);
    let held = Inventory {
        entries: vec![InventoryEntry {
            r#type: "node".into(),
            namespace: "_".into(),
            name: "edge-1".into(),
            uid: "n".into(),
            resource_version: "3".into(),
        }],
    };
    let mut state = NodeState::connected("edge-1", &held, Contents::default());
    let messages = state.plan_objects("edge-1", &wanted(node("3", "1", "True")));
    assert_eq!(messages.len(), 1, "only the marker");
    assert!(
        state.answered(messages[0].id.as_str()),
        "the marker held the own key"
    );
    // A status report (heartbeat): current, nothing to send.
    let heartbeat = Cached::Node(node("4", "1", "False").into());
    assert!(state.is_current(&own, Some(&heartbeat)));
    assert!(
        state
            .plan_objects("edge-1", &wanted(node("4", "1", "False")))
            .is_empty()
    );
    // A label change: sent, at the new version.
    let relabelled = Cached::Node(node("5", "2", "False").into());
    assert!(!state.is_current(&own, Some(&relabelled)));
    let messages = state.plan_objects("edge-1", &wanted(node("5", "2", "False")));
    let update = messages[0].id.to_string();
    let (ops, _) = summary(&messages);
    assert_eq!(
        ops,
        vec![(Operation::Update, "node/edge-1/_/node/edge-1".to_owned())]
    );
    let header = Message::from(messages[0].clone()).header.expect("header");
    assert_eq!(
        (header.uid.as_str(), header.resource_version.as_str()),
        ("n", "5")
    );
    let sent: Node = serde_json::from_slice(&messages[0].body).expect("node json");
    assert_eq!(sent.metadata.labels.expect("labels")["a"], "2");
    // The Node object is deleted: `delete`, once the update was answered (one unanswered
    // message per own key: cloudhub would replace a waiting one).
    assert!(!state.is_current(&own, None));
    assert!(state.plan_objects("edge-1", &BTreeMap::new()).is_empty());
    assert!(state.answered(&update));
    let (ops, _) = summary(&state.plan_objects("edge-1", &BTreeMap::new()));
    assert_eq!(
        ops,
        vec![(Operation::Delete, "node/edge-1/_/node/edge-1".to_owned())]
    );
    assert!(state.is_current(&own, None));
}

#[test]
fn desired_objects_hold_only_the_own_node() {
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    let (nodes, mut writer) = store::<Node>();
    writer.apply_watcher_event(&Event::Apply(node("3", "1", "True")));
    let mut other = node("7", "1", "True");
    other.metadata.name = Some("edge-2".into());
    other.metadata.uid = Some("n2".into());
    writer.apply_watcher_event(&Event::Apply(other));
    let caches = Caches {
        nodes,
        pods: store().0,
        configmaps: store().0,
        secrets: store().0,
        services: store().0,
        endpointslices: store().0,
        shared_ready: tokio::sync::watch::channel(true).1,
        pods_or_nodes_changed: std::sync::Arc::default(),
    };
    let own = desired_objects("edge-1", &caches);
    assert_eq!(
        own.keys().collect::<Vec<_>>(),
        [&desired::node_key("edge-1")]
    );
    assert_eq!(
        own[&desired::node_key("edge-1")].version(),
        Version::new("n", "3")
    );
    let second = desired_objects("edge-2", &caches);
    assert_eq!(
        second.keys().collect::<Vec<_>>(),
        [&desired::node_key("edge-2")]
    );
    assert!(desired_objects("edge-3", &caches).is_empty());
}

#[test]
fn marker_waits_for_the_own_node_update() {
    let own = desired::node_key("edge-1");
    let mut wanted = pod("5", "i", "Pending");
    wanted.insert(own.clone(), Cached::Node(node("3", "1", "True").into()));
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    let messages = state.plan_objects("edge-1", &wanted);
    let (ops, marker) = summary(&messages);
    assert_eq!(
        ops,
        vec![
            (Operation::Update, "node/edge-1/_/node/edge-1".to_owned()),
            (Operation::Update, "node/edge-1/ns/pod/p".to_owned()),
        ]
    );
    assert_eq!(marker, None);
    // The pod's ack changes nothing; the Node's ack lets the marker (counting both) go.
    assert!(!state.answered(messages[1].id.as_str()));
    assert!(state.plan_objects("edge-1", &wanted).is_empty());
    assert!(state.answered(messages[0].id.as_str()));
    let (ops, marker) = summary(&state.plan_objects("edge-1", &wanted));
    assert_eq!(ops.len(), 1);
    assert_eq!(marker, Some(json!({ "updates": 2, "deletes": 0 })));
    // A failed Node update frees the key too and is sent again.
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    let messages = state.plan_objects("edge-1", &wanted);
    assert!(state.failed(messages[0].id.as_str()));
    let (ops, marker) = summary(&state.plan_objects("edge-1", &wanted));
    assert_eq!(
        ops[0],
        (Operation::Update, "node/edge-1/_/node/edge-1".to_owned())
    );
    assert_eq!(marker, None);
}

#[test]
fn every_node_holds_every_service_and_endpointslice() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    let (services, mut service_writer) = store::<Service>();
    service_writer.apply_watcher_event(&Event::Apply(
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web", "namespace": "shop", "uid": "s", "resourceVersion": "4" }
        }))
        .expect("service"),
    ));
    let (endpointslices, mut slice_writer) = store::<EndpointSlice>();
    slice_writer.apply_watcher_event(&Event::Apply(
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web-abc", "namespace": "shop", "uid": "e",
                "resourceVersion": "5" },
            "addressType": "IPv4", "endpoints": []
        }))
        .expect("slice"),
    ));
    let caches = Caches {
        nodes: store().0,
        pods: store().0,
        configmaps: store().0,
        secrets: store().0,
        services,
        endpointslices,
        shared_ready: tokio::sync::watch::channel(true).1,
        pods_or_nodes_changed: std::sync::Arc::default(),
    };
    for node in ["edge-1", "edge-2"] {
        let keys: Vec<_> = desired_objects(node, &caches).into_keys().collect();
        assert_eq!(
            keys,
            [
                ResourceKey::new("shop", ResourceType::Service, "web"),
                ResourceKey::new("shop", ResourceType::EndpointSlice, "web-abc"),
            ]
        );
    }
}
