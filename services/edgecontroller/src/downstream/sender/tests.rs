//! Unit tests of the per-node plan: resync marker, no status echo, failures.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use verge_core::{Operation, ResourceType};
use verge_proto::InventoryEntry;

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
fn summary(messages: &[Message]) -> (Vec<(Operation, String)>, Option<Value>) {
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
    let mut state = NodeState::connected(&inventory("5"), Contents::default());
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
    let mut state = NodeState::connected(&Inventory::default(), Contents::default());
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
    let mut state = NodeState::connected(&inventory("8"), remembered);
    let (ops, _) = summary(&state.plan_objects("edge-1", &pod("10", "j", "Pending")));
    assert_eq!(ops.len(), 1, "{ops:?}");
    // A restarted controller (no memory) resends once, then knows the content.
    let mut state = NodeState::connected(&inventory("8"), Contents::default());
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
    let mut state = NodeState::connected(&inventory("5"), Contents::default());
    assert_eq!(
        state
            .plan_objects("edge-1", &pod("5", "i", "Pending"))
            .len(),
        1
    );
    assert_eq!(state.contents.len(), 1);
    assert!(
        state
            .plan_objects("edge-1", &pod("6", "i", "Running"))
            .is_empty()
    );
}

#[test]
fn failures_forget_what_was_sent() {
    let mut state = NodeState::connected(&Inventory::default(), Contents::default());
    let messages = state.plan_objects("edge-1", &pod("5", "i", "Pending"));
    let (update, marker) = (messages[0].id(), messages[1].id());
    assert!(state.failed(update));
    assert!(state.held.is_empty() && state.contents.is_empty());
    assert!(!state.failed(update));
    // A lost marker comes again with the next plan, which also resends the pod.
    assert!(state.failed(marker));
    let (_, marker) = summary(&state.plan_objects("edge-1", &pod("6", "i", "Running")));
    assert_eq!(marker, Some(json!({ "updates": 1, "deletes": 0 })));

    let k = key();
    state
        .in_flight
        .insert("m-2".into(), Sent::Delete(k.clone(), "u".into()));
    state.held.remove(&k);
    assert!(state.failed("m-2"));
    assert_eq!(state.held.get(&k), Some(&Version::new("u", "")));
    state.in_flight.insert("m-3".into(), Sent::Update(k));
    state.answered("m-3");
    assert!(!state.failed("m-3"));
}
