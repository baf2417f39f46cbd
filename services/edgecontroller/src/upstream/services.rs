//! Service list queries (`query <ns>/servicelist/_`): what the kubelet's service informer
//! gives `getServiceEnvVarMap` to build a container's service environment variables
//! (`{NAME}_SERVICE_HOST`, ...), answered from the Service watch cache.
//!
//! Authorization: a node may list the Services of a namespace only while a pod bound to it
//! lives there. The master service (`kubernetes` in `default`), which the kubelet puts into
//! every container, is always allowed: a query of `default` from a node without pods there
//! is answered with that service alone. The answer is a `v1.ServiceList` of the Services
//! trimmed to what the variables need (name, namespace, uid, resourceVersion, type, cluster
//! IPs, ports), sorted by name.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cache::Caches;
use crate::desired::is_bound_to;
use crate::{Error, Result};

/// The namespace of the master services (Kubernetes `metav1.NamespaceDefault`).
pub const MASTER_NAMESPACE: &str = "default";

/// The master service the kubelet always exposes (its `masterServices` set).
pub const MASTER_SERVICE: &str = "kubernetes";

/// How long a query waits for the pod and service caches' first list before it is refused.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// Which Services of the asked namespace a node may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// All of them: a pod bound to the node lives in the namespace.
    All,
    /// Only the master service: the namespace is `default` and no pod of the node is there.
    MasterOnly,
}

/// Decides what `node` may list in `namespace`, from the cached `pods`.
///
/// # Errors
/// [`Error::NotInNamespace`] when no pod bound to `node` is in `namespace` and the namespace
/// is not `default`.
pub fn authorize<'a>(
    node: &str,
    namespace: &str,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Result<Scope> {
    let has_pod = pods.into_iter().any(|p| {
        is_bound_to(p, node) && p.metadata.namespace.as_deref().unwrap_or("default") == namespace
    });
    if has_pod {
        Ok(Scope::All)
    } else if namespace == MASTER_NAMESPACE {
        Ok(Scope::MasterOnly)
    } else {
        Err(Error::NotInNamespace {
            node: node.to_owned(),
            namespace: namespace.to_owned(),
        })
    }
}

/// The Services of `namespace` among `services` that `scope` allows, trimmed ([`trim`]) and
/// sorted by name.
pub fn select<'a>(
    scope: Scope,
    namespace: &str,
    services: impl IntoIterator<Item = &'a Service>,
) -> Vec<Service> {
    let mut out: Vec<Service> = services
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
        .filter(|s| scope == Scope::All || s.metadata.name.as_deref() == Some(MASTER_SERVICE))
        .map(trim)
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// A Service reduced to what the service environment variables need.
pub fn trim(service: &Service) -> Service {
    let spec = service.spec.as_ref();
    Service {
        metadata: ObjectMeta {
            name: service.metadata.name.clone(),
            namespace: service.metadata.namespace.clone(),
            uid: service.metadata.uid.clone(),
            resource_version: service.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: spec.and_then(|s| s.type_.clone()),
            cluster_ip: spec.and_then(|s| s.cluster_ip.clone()),
            cluster_ips: spec.and_then(|s| s.cluster_ips.clone()),
            ports: spec.and_then(|s| s.ports.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Answers `node`'s query of the Services of `namespace`: a `v1.ServiceList` JSON.
///
/// # Errors
/// [`Error::CachesNotSynced`] before the pod and service caches completed their first list
/// (after waiting up to 10 s); as [`authorize`].
pub async fn answer(caches: &Caches, node: &str, namespace: &str) -> Result<Vec<u8>> {
    let ready = async {
        caches.pods.wait_until_ready().await?;
        caches.wait_shared_ready().await
    };
    tokio::time::timeout(SYNC_WAIT, ready)
        .await
        .map_err(|_| Error::CachesNotSynced)?
        .map_err(|_| Error::CachesNotSynced)?;
    let pods = caches.pods_on(node);
    let scope = authorize(node, namespace, pods.iter().map(AsRef::as_ref))?;
    let services = caches.services.state();
    let items = select(scope, namespace, services.iter().map(AsRef::as_ref));
    let list = k8s_openapi::List {
        items,
        metadata: Default::default(),
    };
    // Serializing k8s-openapi types to a Vec cannot fail.
    Ok(serde_json::to_vec(&list).unwrap_or_default())
}

#[cfg(test)]
mod tests;
