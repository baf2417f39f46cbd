//! Unit tests of references, authorization and the resync diff.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use verge_core::{ResourceKey, ResourceType};
use verge_proto::{Inventory, InventoryEntry};

use super::*;

fn cm(name: &str) -> ResourceKey {
    ResourceKey::new("ns", ResourceType::ConfigMap, name)
}

fn secret(name: &str) -> ResourceKey {
    ResourceKey::new("ns", ResourceType::Secret, name)
}

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "ns", "uid": "u-p", "resourceVersion": "1" },
        "spec": spec,
    }))
    .expect("pod")
}

#[test]
fn references_cover_every_source() {
    let env = |prefix: &str| {
        json!([
            { "name": "A", "valueFrom": { "configMapKeyRef": { "name": format!("{prefix}-cmkey"), "key": "k" } } },
            { "name": "B", "valueFrom": { "secretKeyRef": { "name": format!("{prefix}-skey"), "key": "k" } } },
            { "name": "C", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "D", "value": "plain" },
        ])
    };
    let env_from = |prefix: &str| {
        json!([
            { "configMapRef": { "name": format!("{prefix}-cmall") } },
            { "secretRef": { "name": format!("{prefix}-sall") } },
        ])
    };
    let p = pod(json!({
        "nodeName": "edge-1",
        "imagePullSecrets": [{ "name": "pull" }],
        "volumes": [
            { "name": "v1", "configMap": { "name": "vol-cm" } },
            { "name": "v2", "secret": { "secretName": "vol-secret" } },
            { "name": "v3", "projected": { "sources": [
                { "configMap": { "name": "proj-cm" } },
                { "secret": { "name": "proj-secret" } },
                { "serviceAccountToken": { "path": "token" } },
            ] } },
            { "name": "v4", "emptyDir": {} },
        ],
        "containers": [{ "name": "c", "image": "i", "env": env("c"), "envFrom": env_from("c") }],
        "initContainers": [{ "name": "i", "image": "i", "env": env("i"), "envFrom": env_from("i") }],
        "ephemeralContainers": [{ "name": "e", "image": "i", "env": env("e"), "envFrom": env_from("e") }],
    }));
    let mut expected: BTreeSet<ResourceKey> = [
        secret("pull"),
        cm("vol-cm"),
        secret("vol-secret"),
        cm("proj-cm"),
        secret("proj-secret"),
    ]
    .into_iter()
    .collect();
    for prefix in ["c", "i", "e"] {
        expected.insert(cm(&format!("{prefix}-cmkey")));
        expected.insert(secret(&format!("{prefix}-skey")));
        expected.insert(cm(&format!("{prefix}-cmall")));
        expected.insert(secret(&format!("{prefix}-sall")));
    }
    assert_eq!(references(&p), expected);
}

#[test]
fn pod_without_spec_or_references_has_none() {
    assert!(references(&Pod::default()).is_empty());
    let p = pod(json!({ "containers": [{ "name": "c", "image": "i" }] }));
    assert!(references(&p).is_empty());
}

#[test]
fn only_pods_bound_to_the_node_authorize() {
    let p = pod(json!({ "nodeName": "edge-1", "containers": [{ "name": "c",
        "envFrom": [{ "configMapRef": { "name": "cfg" } }] }] }));
    let pods = [p];
    assert!(node_references("edge-1", &cm("cfg"), &pods));
    assert!(!node_references("edge-2", &cm("cfg"), &pods));
    assert!(!node_references("edge-1", &cm("other"), &pods));
    // Same name, other type or namespace: no.
    assert!(!node_references("edge-1", &secret("cfg"), &pods));
    let elsewhere = ResourceKey::new("other", ResourceType::ConfigMap, "cfg");
    assert!(!node_references("edge-1", &elsewhere, &pods));
    assert!(is_bound_to(&pods[0], "edge-1"));
    assert_eq!(
        pod_key(&pods[0]),
        ResourceKey::new("ns", ResourceType::Pod, "p")
    );
}

fn versions(entries: &[(ResourceKey, &str, &str)]) -> Versions {
    entries
        .iter()
        .map(|(k, uid, rv)| (k.clone(), Version::new(*uid, *rv)))
        .collect()
}

#[test]
fn current_inventory_needs_nothing() {
    let pod_key = ResourceKey::new("ns", ResourceType::Pod, "p");
    let desired = versions(&[(pod_key.clone(), "u1", "5"), (cm("cfg"), "u2", "7")]);
    let inventory = Inventory {
        entries: vec![
            InventoryEntry {
                r#type: "pod".into(),
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u1".into(),
                resource_version: "5".into(),
            },
            InventoryEntry {
                r#type: "configmap".into(),
                namespace: "ns".into(),
                name: "cfg".into(),
                uid: "u2".into(),
                resource_version: "7".into(),
            },
            // The node's own Node object and unknown types are not managed here.
            InventoryEntry {
                r#type: "node".into(),
                namespace: "_".into(),
                name: "edge-1".into(),
                uid: "n".into(),
                resource_version: "1".into(),
            },
            InventoryEntry {
                r#type: "frobnicator".into(),
                namespace: "ns".into(),
                name: "x".into(),
                ..InventoryEntry::default()
            },
        ],
    };
    let held = held_from_inventory(&inventory);
    assert_eq!(held.len(), 2);
    assert!(diff(&desired, &held).is_empty());
}

#[test]
fn diff_sends_missing_changed_and_deletes_stale() {
    let pod_key = ResourceKey::new("ns", ResourceType::Pod, "p");
    let gone = ResourceKey::new("ns", ResourceType::Pod, "gone");
    let desired = versions(&[
        (pod_key.clone(), "u1", "6"), // newer rv
        (cm("cfg"), "u2", "7"),       // same
        (secret("s"), "u3", "1"),     // missing
        (cm("re"), "u4b", "9"),       // recreated: other uid
    ]);
    let held = versions(&[
        (pod_key.clone(), "u1", "5"),
        (cm("cfg"), "u2", "7"),
        (cm("re"), "u4a", "9"),
        (gone.clone(), "u5", "3"),
        (ResourceKey::cluster(ResourceType::Node, "edge-1"), "n", "1"),
    ]);
    let d = diff(&desired, &held);
    assert_eq!(d.updates, vec![pod_key, cm("re"), secret("s")]);
    assert_eq!(d.deletes, vec![(gone, "u5".to_owned())]);
    // An empty node gets everything; an empty desired set deletes only managed types.
    assert_eq!(diff(&desired, &Versions::new()).updates.len(), 4);
    assert_eq!(diff(&Versions::new(), &held).deletes.len(), 4);
}
