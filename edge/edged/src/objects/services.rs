//! Service lists for the service environment variables (the kubelet's service informer):
//! `query <ns>/servicelist/_` to the cloud (docs/protocol.md), whose `v1.ServiceList`
//! answer is kept in the MetaStore (`kept`). When the cloud cannot
//! answer (offline, refused, timed out), the last kept answer stands in, so a container
//! (re)started offline, also after an edgecore restart, gets the same variables; with none
//! kept, the container starts without them and a warning says so (offline autonomy: a pod
//! is never held back for them).

use k8s_openapi::api::core::v1::Service;
use tracing::warn;
use verge_core::ResourceKey;
use verge_runtime::ErrorChain;

use super::StoreObjects;
use crate::Result;

impl StoreObjects {
    /// The Services of `ns`: the cloud's answer (kept), else the last kept answer, else none.
    ///
    /// # Errors
    /// [`Error::Decode`](crate::Error::Decode) for an answer that is no `v1.ServiceList`;
    /// store failures while reading a kept answer.
    pub(super) async fn service_list(&self, ns: &str) -> Result<Vec<Service>> {
        let key = ResourceKey::service_list(ns);
        match self.cloud_list_or_kept(&key, "services").await? {
            Ok(services) => Ok(services),
            Err(cloud_error) => {
                warn!(
                    namespace = ns,
                    error = %ErrorChain(&cloud_error),
                    "no service list known and the cloud cannot answer: \
                     starting containers without service environment variables"
                );
                Ok(Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests;
