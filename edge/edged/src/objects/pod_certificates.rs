//! PodCertificateRequests of `podCertificate` projected volume sources, through the cloud
//! (docs/protocol.md): `query <ns>/podcertificaterequest/<pod>` with the request creates it
//! for the pod, `query <ns>/podcertificaterequest/<name>` without content reads it back.
//! Nothing is kept: a request is only of use while the cloud can answer it (the issued
//! credentials are kept by the volume code for restarts offline).

use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::Pod;
use tracing::debug;
use verge_core::{Module, ResourceKey, ResourceType};

use super::{StoreObjects, decode, is_not_found};
use crate::{Error, Result};

impl StoreObjects {
    /// Creates `request` for `pod` through the cloud; the created request.
    ///
    /// # Errors
    /// The cloud's refusal or unreachability; [`Error::Decode`] for an answer that is no
    /// PodCertificateRequest.
    pub(super) async fn create_pcr(
        &self,
        pod: &Pod,
        request: PodCertificateRequest,
    ) -> Result<PodCertificateRequest> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let key = ResourceKey::new(ns, ResourceType::PodCertificateRequest, name);
        let content = serde_json::to_vec(&request).map_err(|source| Error::Encode {
            what: "PodCertificateRequest",
            source,
        })?;
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, content, self.timeout)
            .await?;
        decode(&key, &answer)
    }

    /// The request `ns/name`, `None` when the cloud says it is not found.
    ///
    /// # Errors
    /// As [`StoreObjects::create_pcr`].
    pub(super) async fn read_pcr(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<PodCertificateRequest>> {
        let key = ResourceKey::new(ns, ResourceType::PodCertificateRequest, name);
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, Vec::new(), self.timeout)
            .await;
        match answer {
            Ok(content) => decode(&key, &content).map(Some),
            Err(verge_metamanager::Error::QueryRefused { reason, .. }) if is_not_found(&reason) => {
                debug!(%key, %reason, "cloud: not found");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
