//! Service lists for the service environment variables (the kubelet's service informer):
//! `query <ns>/servicelist/_` to the cloud (docs/protocol.md), whose `v1.ServiceList`
//! answer is kept in the MetaStore ([`MetaStore::put_answer`]). When the cloud cannot
//! answer (offline, refused, timed out), the last kept answer stands in, so a container
//! (re)started offline, also after an edgecore restart, gets the same variables; with none
//! kept, the container starts without them and a warning says so (offline autonomy: a pod
//! is never held back for them).

use k8s_openapi::api::core::v1::Service;
use tracing::{debug, warn};
use verge_core::{Module, ResourceKey};
use verge_runtime::ErrorChain;

use super::{StoreObjects, decode};
use crate::Result;

impl StoreObjects {
    /// The Services of `ns`: the cloud's answer (kept), else the last kept answer, else none.
    ///
    /// # Errors
    /// [`Error::Decode`](crate::Error::Decode) for an answer that is no `v1.ServiceList`;
    /// store failures while reading a kept answer.
    pub(super) async fn service_list(&self, ns: &str) -> Result<Vec<Service>> {
        let key = ResourceKey::service_list(ns);
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, Vec::new(), self.timeout)
            .await;
        let cloud_error = match answer {
            Ok(content) => {
                let services = decode_list(&key, &content)?;
                let k = key.clone();
                let kept = self.store.blocking(move |s| s.put_answer(&k, &content));
                if let Err(e) = kept.await {
                    warn!(%key, error = %ErrorChain(&e), "service list not kept for offline use");
                }
                return Ok(services);
            }
            Err(e) => e,
        };
        let k = key.clone();
        match self.store.blocking(move |s| s.answer(&k)).await? {
            Some(content) => {
                debug!(%key, error = %ErrorChain(&cloud_error), "cloud cannot answer: last service list");
                decode_list(&key, &content)
            }
            None => {
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

fn decode_list(key: &ResourceKey, content: &[u8]) -> Result<Vec<Service>> {
    let list: k8s_openapi::List<Service> = decode(key, content)?;
    Ok(list.items)
}

#[cfg(test)]
mod tests;
