//! Unit tests of the per-node plan: order, resync marker, no echo, moves, failures.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use verge_core::Operation;
use verge_proto::{InventoryEntry, Message, MessageExt};

use super::*;

fn object(value: Value) -> Arc<DynamicObject> {
    Arc::new(serde_json::from_value(value).expect("object"))
}

/// Device `ns/d` at `rv` with desired value `desired` and status `status`.
fn device(rv: &str, desired: &str, status: Value) -> Arc<DynamicObject> {
    object(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        // Without a status subresource every write bumps the generation.
        "metadata": { "name": "d", "namespace": "ns", "uid": "u-d", "resourceVersion": rv,
            "generation": rv.parse::<i64>().unwrap_or_default() },
        "spec": { "nodeName": "edge-1", "deviceModelRef": { "name": "m" },
            "properties": [{ "name": "temp", "desired": { "value": desired } }] },
        "status": status,
    }))
}

fn model(rv: &str) -> Arc<DynamicObject> {
    object(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": { "name": "m", "namespace": "ns", "uid": "u-m", "resourceVersion": rv },
        "spec": { "properties": [{ "name": "temp" }] },
    }))
}

fn device_key() -> ResourceKey {
    ResourceKey::new("ns", ResourceType::Device, "d")
}

fn model_key() -> ResourceKey {
    ResourceKey::new("ns", ResourceType::DeviceModel, "m")
}

fn wanted(
    device: Arc<DynamicObject>,
    model: Arc<DynamicObject>,
) -> BTreeMap<ResourceKey, Arc<DynamicObject>> {
    BTreeMap::from([(device_key(), device), (model_key(), model)])
}

fn entry(t: &str, name: &str, uid: &str, rv: &str) -> InventoryEntry {
    InventoryEntry {
        r#type: t.into(),
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        resource_version: rv.into(),
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

fn op(operation: Operation, resource: &str) -> (Operation, String) {
    (operation, resource.to_owned())
}

#[test]
fn an_empty_node_gets_the_model_first_then_the_device_then_the_marker() {
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    let (ops, marker) =
        summary(&state.plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1"))));
    assert_eq!(
        ops,
        [
            op(Operation::Update, "node/edge-1/ns/devicemodel/m"),
            op(Operation::Update, "node/edge-1/ns/device/d"),
            op(Operation::Resync, "node/edge-1/_/device/edge-1"),
        ]
    );
    assert_eq!(marker, Some(json!({ "updates": 2, "deletes": 0 })));
    // Nothing more while nothing changes; the marker is sent once per connect.
    assert!(
        state
            .plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1")))
            .is_empty()
    );
}

#[test]
fn a_current_inventory_gets_only_the_marker_and_other_types_are_kept() {
    let inventory = Inventory {
        entries: vec![
            entry("device", "d", "u-d", "1"),
            entry("devicemodel", "m", "u-m", "1"),
            entry("pod", "p", "u-p", "1"),
            entry("configmap", "c", "u-c", "1"),
        ],
    };
    let mut state = NodeState::connected("edge-1", &inventory, Contents::default());
    let (ops, marker) =
        summary(&state.plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1"))));
    assert_eq!(ops, [op(Operation::Resync, "node/edge-1/_/device/edge-1")]);
    assert_eq!(marker, Some(json!({ "updates": 0, "deletes": 0 })));
    // Nothing desired any more (device moved away or deleted): device first, then model.
    let (ops, _) = summary(&state.plan_objects("edge-1", &BTreeMap::new()));
    assert_eq!(
        ops,
        [
            op(Operation::Delete, "node/edge-1/ns/device/d"),
            op(Operation::Delete, "node/edge-1/ns/devicemodel/m"),
        ]
    );
}

#[test]
fn status_only_changes_are_not_sent_and_desired_values_are() {
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    state.plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1")));
    let status_only = device("2", "20", json!({ "reportCycle": 7 }));
    assert!(
        state
            .plan_objects("edge-1", &wanted(status_only, model("1")))
            .is_empty()
    );
    let (ops, _) =
        summary(&state.plan_objects("edge-1", &wanted(device("3", "21", json!({})), model("1"))));
    assert_eq!(ops, [op(Operation::Update, "node/edge-1/ns/device/d")]);
    // The fingerprints outlive the session: no echo after a reconnect either.
    let contents = state.into_contents();
    let inventory = Inventory {
        entries: vec![
            entry("device", "d", "u-d", "3"),
            entry("devicemodel", "m", "u-m", "1"),
        ],
    };
    let mut state = NodeState::connected("edge-1", &inventory, contents);
    let status_only = device("4", "21", json!({ "x": 1 }));
    let (ops, _) = summary(&state.plan_objects("edge-1", &wanted(status_only, model("1"))));
    assert_eq!(ops, [op(Operation::Resync, "node/edge-1/_/device/edge-1")]);
}

#[test]
fn failed_messages_are_sent_again() {
    let mut state = NodeState::connected("edge-1", &Inventory::default(), Contents::default());
    let messages = state.plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1")));
    let ids: Vec<String> = messages.iter().map(|m| m.id.to_string()).collect();
    // The device update and the marker were lost; the model arrived.
    assert!(!state.answered(&ids[0]));
    assert!(state.failed(&ids[1]));
    assert!(state.failed(&ids[2]));
    assert!(!state.failed("unknown"));
    let (ops, marker) =
        summary(&state.plan_objects("edge-1", &wanted(device("1", "20", json!({})), model("1"))));
    assert_eq!(
        ops,
        [
            op(Operation::Update, "node/edge-1/ns/device/d"),
            op(Operation::Resync, "node/edge-1/_/device/edge-1"),
        ]
    );
    assert_eq!(marker, Some(json!({ "updates": 1, "deletes": 0 })));
    // A lost delete is sent again too.
    let deletes = state.plan_objects("edge-1", &BTreeMap::new());
    assert_eq!(deletes.len(), 2);
    assert!(state.failed(deletes[0].id.as_str()));
    let (ops, _) = summary(&state.plan_objects("edge-1", &BTreeMap::new()));
    assert_eq!(ops, [op(Operation::Delete, "node/edge-1/ns/device/d")]);
}
