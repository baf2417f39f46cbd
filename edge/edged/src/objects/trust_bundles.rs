//! ClusterTrustBundles for `clusterTrustBundle` projected volume sources (the kubelet's
//! clustertrustbundle manager): `query _/clustertrustbundle/<name>` or
//! `query _/clustertrustbundlelist/<domain>:<path>` to the cloud (docs/protocol.md), whose
//! `ClusterTrustBundleList` answer (a bundle that does not exist: an empty list) is kept in
//! the MetaStore ([`MetaStore::put_answer`](verge_edge_store::MetaStore::put_answer)). When
//! the cloud cannot answer (offline, refused, timed out), the last kept answer stands in, so
//! a pod (re)started offline, also after an edgecore restart, gets the same trust anchors;
//! with none kept, the cloud's error is returned (the kubelet fails such a mount while its
//! informer has not synced).

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use tracing::{debug, warn};
use verge_core::{Module, ResourceKey};
use verge_runtime::ErrorChain;

use super::{StoreObjects, decode};
use crate::Result;

impl StoreObjects {
    /// The bundles the cloud answers for `key` (kept), else the last kept answer.
    ///
    /// # Errors
    /// [`Error::Decode`](crate::Error::Decode) for an answer that is no
    /// `ClusterTrustBundleList`; the cloud's error when it cannot answer and nothing is kept;
    /// store failures while reading a kept answer.
    pub(super) async fn trust_bundle_list(
        &self,
        key: ResourceKey,
    ) -> Result<Vec<ClusterTrustBundle>> {
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, Vec::new(), self.timeout)
            .await;
        let cloud_error = match answer {
            Ok(content) => {
                let bundles = decode_list(&key, &content)?;
                let k = key.clone();
                let kept = self.store.blocking(move |s| s.put_answer(&k, &content));
                if let Err(e) = kept.await {
                    warn!(%key, error = %ErrorChain(&e), "trust bundles not kept for offline use");
                }
                return Ok(bundles);
            }
            Err(e) => e,
        };
        let k = key.clone();
        match self.store.blocking(move |s| s.answer(&k)).await? {
            Some(content) => {
                debug!(%key, error = %ErrorChain(&cloud_error), "cloud cannot answer: last trust bundles");
                decode_list(&key, &content)
            }
            None => Err(cloud_error.into()),
        }
    }
}

fn decode_list(key: &ResourceKey, content: &[u8]) -> Result<Vec<ClusterTrustBundle>> {
    let list: k8s_openapi::List<ClusterTrustBundle> = decode(key, content)?;
    Ok(list.items)
}

#[cfg(test)]
mod tests;
