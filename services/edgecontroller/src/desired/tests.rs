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

fn inv(kind: &str, ns: &str, name: &str, uid: &str, rv: &str) -> InventoryEntry {
    InventoryEntry {
        r#type: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
        resource_version: rv.into(),
    }
}

#[test]
fn current_inventory_needs_nothing() {
    let pod_key = ResourceKey::new("ns", ResourceType::Pod, "p");
    let desired = versions(&[
        (pod_key.clone(), "u1", "5"),
        (cm("cfg"), "u2", "7"),
        (node_key("edge-1"), "n", "3"),
    ]);
    let inventory = Inventory {
        entries: vec![
            inv("pod", "ns", "p", "u1", "5"),
            inv("configmap", "ns", "cfg", "u2", "7"),
            // The node's own Node object is managed, and so are other nodes' (site peers).
            inv("node", "_", "edge-1", "n", "3"),
            inv("node", "_", "edge-2", "n2", "1"),
            // Unknown types are not.
            inv("frobnicator", "ns", "x", "", ""),
        ],
    };
    let held = held_from_inventory("edge-1", &inventory);
    assert_eq!(held.len(), 4);
    assert!(held.contains_key(&node_key("edge-1")));
    assert!(held.contains_key(&node_key("edge-2")));
    // edge-2 is no site peer of edge-1 (not desired): its Node is deleted.
    let d = diff(&desired, &held);
    assert!(d.updates.is_empty());
    assert_eq!(d.deletes.len(), 1, "{d:?}");
    let mut peered = desired.clone();
    peered.insert(node_key("edge-2"), Version::new("n2", "1"));
    assert!(diff(&peered, &held).is_empty());
}

/// Regression (fuzz target `inventory`): an entry whose namespace or name is no valid path
/// segment was held, and the resync's `delete` of it carried a path cloudhub refuses, which
/// ended the controller's stream on every (re-)attach.
#[test]
fn inventory_entries_with_invalid_paths_are_not_held() {
    let inventory = Inventory {
        entries: vec![
            inv("pod", "\u{b}uidlt", "web-0", "u1", "1"),
            inv("pod", "a/b", "p", "u2", "1"),
            inv("secret", "ns", "x/y", "u3", "1"),
            inv("configmap", "", "cfg", "u4", "1"),
            inv("configmap", "ns", "with space", "u5", "1"),
            inv("node", "_", "", "u6", "1"),
            inv("pod", "ns", "ok", "u7", "1"),
        ],
    };
    let held = held_from_inventory("edge-1", &inventory);
    let keys: Vec<String> = held.keys().map(ToString::to_string).collect();
    assert_eq!(keys, ["ns/pod/ok"]);
    // Every delete the resync would send names a path that parses back.
    for (key, _) in diff(&Versions::new(), &held).deletes {
        let path = format!("node/edge-1/{key}");
        assert!(path.parse::<verge_core::NodeResource>().is_ok(), "{path}");
    }
}

#[test]
fn own_node_is_sent_when_its_content_changed_and_deleted_when_gone() {
    let own = node_key("edge-1");
    let held = versions(&[(own.clone(), "n", "3")]);
    // A newer version that differs only in status (a heartbeat): nothing.
    let heartbeat = versions(&[(own.clone(), "n", "4")]);
    assert!(diff_by_content(&heartbeat, &held, |_, _| true).is_empty());
    // Its spec or labels changed: update.
    let d = diff_by_content(&heartbeat, &held, |_, _| false);
    assert_eq!(d.updates, vec![own.clone()]);
    assert!(d.deletes.is_empty());
    // Not held yet: update; deleted from the API server: delete.
    assert_eq!(
        diff(&heartbeat, &Versions::new()).updates,
        vec![own.clone()]
    );
    assert_eq!(
        diff(&Versions::new(), &held).deletes,
        vec![(own, "n".to_owned())]
    );
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
        (node_key("edge-1"), "n", "1"),
    ]);
    let held = versions(&[
        (pod_key.clone(), "u1", "5"),
        (cm("cfg"), "u2", "7"),
        (cm("re"), "u4a", "9"),
        (gone.clone(), "u5", "3"),
        (node_key("edge-1"), "n", "1"),
        (ResourceKey::new("ns", ResourceType::Twin, "t"), "t", "1"),
    ]);
    let d = diff(&desired, &held);
    assert_eq!(d.updates, vec![pod_key, cm("re"), secret("s")]);
    assert_eq!(d.deletes, vec![(gone, "u5".to_owned())]);
    // An empty node gets everything; an empty desired set deletes only managed types.
    assert_eq!(diff(&desired, &Versions::new()).updates.len(), 5);
    assert_eq!(diff(&Versions::new(), &held).deletes.len(), 5);
}
