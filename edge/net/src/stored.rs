//! Reading the objects the Service proxy and the resolver follow out of the store.

use k8s_openapi::api::core::v1::Node;
use serde::de::DeserializeOwned;
use tracing::warn;
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;

use crate::podnet::PodNetwork;

/// The object at `key`, if stored and parsable.
pub fn get<T: DeserializeOwned>(store: &MetaStore, key: &ResourceKey) -> Option<T> {
    let stored = store.get(key).ok().flatten()?;
    serde_json::from_slice(&stored.content).ok()
}

/// Every stored object of `kind` that parses (the others are logged and skipped).
pub fn list<T: DeserializeOwned>(store: &MetaStore, kind: ResourceType) -> Vec<T> {
    list_keyed(store, kind)
        .into_iter()
        .map(|(_, object)| object)
        .collect()
}

/// [`list`] with each object's store key.
pub fn list_keyed<T: DeserializeOwned>(
    store: &MetaStore,
    kind: ResourceType,
) -> Vec<(ResourceKey, T)> {
    match store.list(kind) {
        Ok(rows) => rows
            .into_iter()
            .filter_map(|(key, o)| {
                let object = parse(&key, &o.content)?;
                Some((key, object))
            })
            .collect(),
        Err(e) => {
            warn!(error = %verge_runtime::ErrorChain(&e), "listing the store failed");
            Vec::new()
        }
    }
}

/// The stored JSON `content` of `key` parsed; a failure is logged and gives `None`.
pub fn parse<T: DeserializeOwned>(key: &ResourceKey, content: &[u8]) -> Option<T> {
    serde_json::from_slice(content)
        .inspect_err(|e| warn!(object = %key, error = %e, "stored object does not parse"))
        .ok()
}

/// Node `node`'s stored Node object.
pub fn node(store: &MetaStore, node: &str) -> Option<Node> {
    get(store, &ResourceKey::cluster(ResourceType::Node, node))
}

/// The pod network of `node` from its stored Node's `spec.podCIDR`.
pub fn pod_network(store: &MetaStore, node_name: &str) -> Option<PodNetwork> {
    node(store, node_name)?
        .spec?
        .pod_cidr
        .and_then(|cidr| PodNetwork::new(node_name, &cidr).ok())
}
