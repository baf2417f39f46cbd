//! Lists asked of the cloud with the last answer kept for offline use: the query's answer is
//! kept in the MetaStore ([`MetaStore::put_answer`](verge_edge_store::MetaStore::put_answer))
//! and, when the cloud cannot answer (offline, refused, timed out), the last kept answer
//! stands in, also after an edgecore restart (the kubelet's informers keep their last lists
//! the same way). The Service lists of the service environment variables and the
//! ClusterTrustBundle lists of projected volumes are read so.

use serde::de::DeserializeOwned;
use tracing::{debug, warn};
use verge_core::{Module, ResourceKey};
use verge_runtime::ErrorChain;

use super::{StoreObjects, decode};
use crate::Result;

impl StoreObjects {
    /// The items of the list the cloud answers for `key` (kept), else of the last kept
    /// answer; `Ok(Err(_))` with the cloud's error when it cannot answer and nothing is
    /// kept. `what` names the list in logs.
    ///
    /// # Errors
    /// [`Error::Decode`](crate::Error::Decode) for an answer that is no list of `T`; store
    /// failures while reading a kept answer.
    pub(super) async fn cloud_list_or_kept<T: DeserializeOwned + k8s_openapi::ListableResource>(
        &self,
        key: &ResourceKey,
        what: &str,
    ) -> Result<Result<Vec<T>, verge_metamanager::Error>> {
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, key, Vec::new(), self.timeout)
            .await;
        let cloud_error = match answer {
            Ok(content) => {
                let items = decode_list(key, &content)?;
                let k = key.clone();
                let kept = self.store.blocking(move |s| s.put_answer(&k, &content));
                if let Err(e) = kept.await {
                    warn!(%key, what, error = %ErrorChain(&e), "list not kept for offline use");
                }
                return Ok(Ok(items));
            }
            Err(e) => e,
        };
        let k = key.clone();
        match self.store.blocking(move |s| s.answer(&k)).await? {
            Some(content) => {
                debug!(%key, what, error = %ErrorChain(&cloud_error), "cloud cannot answer: last kept list");
                decode_list(key, &content).map(Ok)
            }
            None => Ok(Err(cloud_error)),
        }
    }
}

fn decode_list<T: DeserializeOwned + k8s_openapi::ListableResource>(
    key: &ResourceKey,
    content: &[u8],
) -> Result<Vec<T>> {
    let list: k8s_openapi::List<T> = decode(key, content)?;
    Ok(list.items)
}
