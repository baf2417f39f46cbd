//! ClusterTrustBundle queries, for the kubelet's `clusterTrustBundle` projected volume source
//! (its `clustertrustbundle` manager reads them from an informer of every bundle):
//!
//! - `query _/clustertrustbundle/<name>`: the bundle of that name;
//! - `query _/clustertrustbundlelist/<domain>:<path>`: every bundle of the signer
//!   `<domain>/<path>` (`spec.signerName`; [`ResourceKey::trust_bundles_of`]).
//!
//! Both are answered with a `certificates.k8s.io/v1` `ClusterTrustBundleList` (a missing
//! bundle is an empty list, not an error, so the edge can keep "does not exist" for offline
//! use), each bundle trimmed to name, uid, resourceVersion, labels and spec, sorted by name.
//! The edge applies the projection's label selector and merges the PEM blocks itself, as the
//! kubelet filters its informer cache.
//!
//! Authorization is the node's own: the reads go through the node's client
//! ([`crate::node_clients`]), and the Node authorizer lets every node get and list every
//! ClusterTrustBundle (its static node rules grant `get`, `list`, `watch` on
//! `clustertrustbundles` while the `ClusterTrustBundle` feature is on, GA in 1.37), so
//! edgecontroller adds no check of its own; an API server that says no (403) is answered as
//! an `error` with its reason.

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::ListParams;
use verge_core::{ResourceKey, ResourceType};

use crate::{Error, Result};

/// What a ClusterTrustBundle query asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// The bundle of this name (`metadata.name`).
    Name(String),
    /// Every bundle of this signer (`spec.signerName`, `<domain>/<path>`).
    Signer(String),
}

/// The query `key` names, from `node`'s session.
///
/// # Errors
/// [`Error::Forbidden`] for a namespaced path; [`Error::Unsupported`] for a
/// `clustertrustbundlelist` name that is no `<domain>:<path>`, or another type.
pub fn parse(node: &str, key: &ResourceKey) -> Result<Query> {
    if key.k8s_namespace().is_some() {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!("namespaced {key}"),
        });
    }
    match key.kind {
        ResourceType::ClusterTrustBundle => Ok(Query::Name(key.name.clone())),
        ResourceType::ClusterTrustBundleList => key
            .trust_bundle_signer()
            .map(Query::Signer)
            .ok_or_else(|| Error::Unsupported {
                operation: "query".into(),
                resource: key.to_string(),
            }),
        _ => Err(Error::Unsupported {
            operation: "query".into(),
            resource: key.to_string(),
        }),
    }
}

/// A bundle reduced to what the edge needs: name, uid, resourceVersion, labels and spec.
pub fn trim(bundle: ClusterTrustBundle) -> ClusterTrustBundle {
    ClusterTrustBundle {
        metadata: ObjectMeta {
            name: bundle.metadata.name,
            uid: bundle.metadata.uid,
            resource_version: bundle.metadata.resource_version,
            labels: bundle.metadata.labels,
            ..ObjectMeta::default()
        },
        spec: bundle.spec,
    }
}

/// The `ClusterTrustBundleList` JSON of `bundles`, trimmed ([`trim`]) and sorted by name.
pub fn list_json(bundles: impl IntoIterator<Item = ClusterTrustBundle>) -> Vec<u8> {
    let mut items: Vec<ClusterTrustBundle> = bundles.into_iter().map(trim).collect();
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let list = k8s_openapi::List {
        items,
        metadata: Default::default(),
    };
    // Serializing k8s-openapi types to a Vec cannot fail.
    serde_json::to_vec(&list).unwrap_or_default()
}

/// The field selector of a signer's bundles (`spec.signerName`, a field the API server
/// indexes for ClusterTrustBundles).
pub fn signer_selector(signer: &str) -> String {
    format!("spec.signerName={signer}")
}

/// Answers `query` with `client` (the asking node's): a `ClusterTrustBundleList` JSON.
///
/// # Errors
/// [`Error::Kube`] when the API server refuses or fails the read.
pub async fn answer(client: &kube::Client, query: &Query) -> Result<Vec<u8>> {
    let api: Api<ClusterTrustBundle> = Api::all(client.clone());
    let bundles = match query {
        Query::Name(name) => api
            .get_opt(name)
            .await
            .map_err(Error::kube("get clustertrustbundle"))?
            .into_iter()
            .collect::<Vec<_>>(),
        Query::Signer(signer) => {
            let params = ListParams::default().fields(&signer_selector(signer));
            api.list(&params)
                .await
                .map_err(Error::kube("list clustertrustbundles"))?
                .items
        }
    };
    Ok(list_json(bundles))
}

#[cfg(test)]
mod tests;
