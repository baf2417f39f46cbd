//! Queries of configmaps and secrets, answered only for objects a pod bound to the asking
//! node references (as the Kubernetes node authorizer restricts a kubelet).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use verge_core::{ResourceKey, ResourceType};

use crate::cache::Caches;
use crate::desired::node_references;
use crate::{Error, Result};

/// How long a query waits for the caches' first list before it is refused.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// Checks, from the pod cache, that a pod bound to `node` references `key`.
///
/// # Errors
/// [`Error::CachesNotSynced`] before the pod cache completed its first list;
/// [`Error::NotReferenced`] when no pod bound to `node` references `key`.
pub async fn authorize(caches: &Caches, node: &str, key: &ResourceKey) -> Result<()> {
    tokio::time::timeout(SYNC_WAIT, caches.pods.wait_until_ready())
        .await
        .map_err(|_| Error::CachesNotSynced)?
        .map_err(|_| Error::CachesNotSynced)?;
    let pods = caches.pods_on(node);
    if node_references(node, key, pods.iter().map(AsRef::as_ref)) {
        Ok(())
    } else {
        Err(Error::NotReferenced {
            node: node.to_owned(),
            what: key.to_string(),
        })
    }
}

/// Answers a query of `key` (a configmap or secret) from `node`: the object's JSON, read from
/// the API server so the answer is never older than what the node already holds.
///
/// # Errors
/// As [`authorize`]; [`Error::Kube`] when the object cannot be read (including not found);
/// [`Error::Unsupported`] for other types.
pub async fn answer(
    client: &kube::Client,
    caches: &Caches,
    node: &str,
    key: &ResourceKey,
) -> Result<Vec<u8>> {
    authorize(caches, node, key).await?;
    let ns = key.namespace.as_str();
    let json = match key.kind {
        ResourceType::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let object = api
                .get(&key.name)
                .await
                .map_err(Error::kube("get configmap"))?;
            serde_json::to_vec(&object)
        }
        ResourceType::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let object = api
                .get(&key.name)
                .await
                .map_err(Error::kube("get secret"))?;
            serde_json::to_vec(&object)
        }
        _ => {
            return Err(Error::Unsupported {
                operation: "query".into(),
                resource: key.to_string(),
            });
        }
    };
    Ok(json.unwrap_or_default())
}
