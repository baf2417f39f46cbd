//! ClusterTrustBundles for `clusterTrustBundle` projected volume sources (the kubelet's
//! clustertrustbundle manager): `query _/clustertrustbundle/<name>` or
//! `query _/clustertrustbundlelist/<domain>:<path>` to the cloud (docs/protocol.md), whose
//! `ClusterTrustBundleList` answer (a bundle that does not exist: an empty list) is kept in
//! the MetaStore (`kept`). When
//! the cloud cannot answer (offline, refused, timed out), the last kept answer stands in, so
//! a pod (re)started offline, also after an edgecore restart, gets the same trust anchors;
//! with none kept, the cloud's error is returned (the kubelet fails such a mount while its
//! informer has not synced).

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use verge_core::ResourceKey;

use super::StoreObjects;
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
        Ok(self
            .cloud_list_or_kept(&key, "cluster trust bundles")
            .await??)
    }
}

#[cfg(test)]
mod tests;
