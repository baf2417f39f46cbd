//! Answers from what the node holds by design, in metamanager's store: its Node, its pods,
//! their ConfigMaps and Secrets, and every Service and EndpointSlice. A pod carries the
//! node's own latest status while that status waits in the outbox for the cloud (offline, the
//! stored pod still has the status the API server last sent). Lists carry the greatest
//! resourceVersion of their items, as the objects' own resourceVersions are the API
//! server's.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::{MetaStore, OutboxKey, StoredObject};

use crate::selectors::{FieldSelector, LabelSelector};

/// A resource the node holds: its store type, `apiVersion` and `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The store's type.
    pub kind: ResourceType,
    /// `apiVersion` of its objects.
    pub api_version: &'static str,
    /// `kind` of its objects.
    pub object_kind: &'static str,
}

/// The resource of API group `group` and version `version` named `resource` if the node
/// holds it by design.
pub fn held(group: &str, version: &str, resource: &str) -> Option<Held> {
    let (kind, api_version, object_kind) = match (group, version, resource) {
        ("", "v1", "pods") => (ResourceType::Pod, "v1", "Pod"),
        ("", "v1", "configmaps") => (ResourceType::ConfigMap, "v1", "ConfigMap"),
        ("", "v1", "secrets") => (ResourceType::Secret, "v1", "Secret"),
        ("", "v1", "services") => (ResourceType::Service, "v1", "Service"),
        ("", "v1", "nodes") => (ResourceType::Node, "v1", "Node"),
        ("discovery.k8s.io", "v1", "endpointslices") => (
            ResourceType::EndpointSlice,
            "discovery.k8s.io/v1",
            "EndpointSlice",
        ),
        _ => return None,
    };
    Some(Held {
        kind,
        api_version,
        object_kind,
    })
}

/// The object as the API server would answer it: `apiVersion` and `kind` set, and for a pod
/// with `overlay` the node's pending status (see the module docs).
fn prepare(
    store: &MetaStore,
    held: Held,
    key: &ResourceKey,
    stored: &StoredObject,
    overlay: bool,
) -> Option<Value> {
    let mut object: Value = serde_json::from_slice(&stored.content).ok()?;
    let map = object.as_object_mut()?;
    map.insert("apiVersion".into(), json!(held.api_version));
    map.insert("kind".into(), json!(held.object_kind));
    if overlay
        && held.kind == ResourceType::Pod
        && let Some(status) = pending_status(store, key)
    {
        map.insert("status".into(), status);
    }
    Some(object)
}

/// The node's status of the pod at `key` while it waits in the outbox.
fn pending_status(store: &MetaStore, key: &ResourceKey) -> Option<Value> {
    let entry = store
        .outbox_get(&OutboxKey::pod_status(key).to_string())
        .ok()??;
    let envelope = verge_proto::envelope::decode(&entry.wire).ok()?;
    serde_json::from_slice(&envelope.body).ok()
}

/// The object `name` (in namespace `namespace`, empty for cluster-scoped) of `held`.
pub fn get(store: &MetaStore, held: Held, namespace: &str, name: &str) -> Option<Value> {
    let key = ResourceKey::new(namespace, held.kind, name);
    let stored = store.get(&key).ok()??;
    prepare(store, held, &key, &stored, true)
}

/// The objects of `held` in `namespace` (all namespaces if `None`) that the selectors match,
/// in key order, with the greatest resourceVersion among them; with `overlay`, pods carry the
/// node's pending status, else the API server's.
pub fn list(
    store: &MetaStore,
    held: Held,
    namespace: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
    overlay: bool,
) -> (Vec<Value>, u64) {
    let mut newest = 0u64;
    let objects = store
        .list(held.kind)
        .unwrap_or_default()
        .into_iter()
        .filter(|(key, _)| namespace.is_none_or(|ns| key.namespace == ns))
        .filter_map(|(key, stored)| {
            newest = newest.max(stored.resource_version.parse().unwrap_or(0));
            prepare(store, held, &key, &stored, overlay)
        })
        .filter(|object| {
            let object_labels: BTreeMap<String, String> = object
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            labels.matches(&object_labels) && fields.matches(object)
        })
        .collect();
    (objects, newest)
}

/// A `<Kind>List` of `items` at `resource_version`.
pub fn list_object(held: Held, items: Vec<Value>, resource_version: u64) -> Value {
    json!({
        "apiVersion": held.api_version,
        "kind": format!("{}List", held.object_kind),
        "metadata": { "resourceVersion": resource_version.to_string() },
        "items": items,
    })
}
