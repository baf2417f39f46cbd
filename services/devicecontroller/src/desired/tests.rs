//! Unit tests of the desired set and the validation of Devices.

use serde_json::{Value, json};
use verge_proto::InventoryEntry;

use super::*;

fn object(value: Value) -> Arc<DynamicObject> {
    Arc::new(serde_json::from_value(value).expect("object"))
}

fn model(name: &str) -> Arc<DynamicObject> {
    object(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": { "name": name, "namespace": "ns", "uid": format!("m-{name}"),
            "resourceVersion": "1" },
        "spec": { "protocol": "virtual", "properties": [
            { "name": "temp", "type": "INT", "accessMode": "ReadOnly" }] }
    }))
}

/// Device `name` on `edge-1` of model `thermo` with `properties`.
fn device(name: &str, properties: Value) -> Arc<DynamicObject> {
    object(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": { "name": name, "namespace": "ns", "uid": format!("u-{name}"),
            "resourceVersion": "1" },
        "spec": {
            "deviceModelRef": { "name": "thermo" },
            "nodeName": "edge-1",
            "protocol": { "protocolName": "virtual", "configData": { "id": 1 } },
            "properties": properties,
            "stateReport": { "reportCycle": 5000 }
        }
    }))
}

fn good() -> Value {
    json!([{ "name": "temp", "reportToCloud": true,
        "visitors": { "protocolName": "virtual", "configData": { "min": 0, "unit": "C" } } }])
}

fn lookup(models: &[Arc<DynamicObject>]) -> impl Fn(&ResourceKey) -> Option<Arc<DynamicObject>> {
    let models: BTreeMap<ResourceKey, Arc<DynamicObject>> = models
        .iter()
        .map(|m| (model_key_of(m), m.clone()))
        .collect();
    move |key| models.get(key).cloned()
}

fn key(kind: ResourceType, name: &str) -> ResourceKey {
    ResourceKey::new("ns", kind, name)
}

#[test]
fn a_valid_device_goes_with_its_model() {
    let d = device("t1", good());
    assert_eq!(node_name(&d), Some("edge-1"));
    assert_eq!(
        model_key(&d),
        Some(key(ResourceType::DeviceModel, "thermo"))
    );
    let wanted = desired([d], lookup(&[model("thermo"), model("other")]));
    assert!(wanted.refused.is_empty());
    let keys: Vec<_> = wanted.objects.keys().cloned().collect();
    assert_eq!(
        keys,
        [
            key(ResourceType::Device, "t1"),
            key(ResourceType::DeviceModel, "thermo")
        ]
    );
}

#[test]
fn invalid_devices_are_left_out_alone() {
    let devices = [
        device("good", good()),
        // No visitors.
        device("no-visitor", json!([{ "name": "temp" }])),
        // A property the model does not have.
        device(
            "unknown",
            json!([{ "name": "humidity", "visitors": { "protocolName": "virtual" } }]),
        ),
        // Nested configData.
        device(
            "nested",
            json!([{ "name": "temp",
                "visitors": { "protocolName": "virtual", "configData": { "reg": { "a": 1 } } } }]),
        ),
        // A field of the wrong type.
        device(
            "unreadable",
            json!([{ "name": "temp", "reportCycle": "often" }]),
        ),
    ];
    let wanted = desired(devices, lookup(&[model("thermo")]));
    let sent: Vec<_> = wanted.objects.keys().map(|k| k.name.as_str()).collect();
    assert_eq!(sent, ["good", "thermo"]);
    let refused: Vec<_> = wanted
        .refused
        .iter()
        .map(|(k, p)| (k.name.as_str(), p.reason()))
        .collect();
    assert_eq!(
        refused,
        [
            ("no-visitor", "InvalidDevice"),
            ("unknown", "InvalidDevice"),
            ("nested", "InvalidDevice"),
            ("unreadable", "InvalidDevice"),
        ]
    );
    let nested = &wanted.refused[2].1;
    assert!(
        nested.note().contains("configData.reg is an object"),
        "{}",
        nested.note()
    );
    let unreadable = &wanted.refused[3].1;
    assert!(
        unreadable.note().contains("reportCycle") || unreadable.note().contains("i64"),
        "{}",
        unreadable.note()
    );
}

#[test]
fn a_missing_model_keeps_its_devices_back() {
    let wanted = desired([device("t1", good())], lookup(&[]));
    assert!(wanted.objects.is_empty());
    let (k, problem) = &wanted.refused[0];
    assert_eq!(k, &key(ResourceType::Device, "t1"));
    assert_eq!(problem.reason(), "DeviceModelNotFound");
    assert_eq!(problem.note(), "device model ns/thermo not found");
}

#[test]
fn inventory_entries_of_devices_and_models_are_held() {
    let entry = |t: &str, ns: &str, name: &str| InventoryEntry {
        r#type: t.into(),
        namespace: ns.into(),
        name: name.into(),
        uid: format!("u-{name}"),
        resource_version: "3".into(),
    };
    let inventory = Inventory {
        entries: vec![
            entry("device", "ns", "t1"),
            entry("devicemodel", "ns", "thermo"),
            entry("pod", "ns", "p"),
            entry("device", "_", "edge-1"),
            entry("device", "ns", "bad/name"),
        ],
    };
    let held = held_from_inventory(&inventory);
    let keys: Vec<_> = held.keys().cloned().collect();
    assert_eq!(
        keys,
        [
            key(ResourceType::Device, "t1"),
            key(ResourceType::DeviceModel, "thermo")
        ]
    );
    assert_eq!(held[&keys[0]], diff::Version::new("u-t1", "3"));
}
