//! The API objects a pod needs besides itself: configmaps, secrets, service-account tokens,
//! services and ClusterTrustBundles (the kubelet's configmap/secret managers, token manager,
//! service informer and clustertrustbundle manager).
//!
//! [`PodObjects`] is what env and volumes use; [`StoreObjects`] reads the MetaStore first
//! (the objects edgecontroller sends for the pods of this node) and falls back to a cloud
//! `query` (docs/protocol.md), storing the answer so it survives a restart offline. Service
//! lists and ClusterTrustBundles go the other way round (modules `services`,
//! `trust_bundles`): the cloud first, the last answer kept in the MetaStore when the cloud
//! cannot answer (nothing sends them down, so only asking again sees a change).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::{ClusterTrustBundle, PodCertificateRequest};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use tracing::debug;
use verge_core::{Module, ResourceKey, ResourceType};

use crate::{Error, Result};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::QueryRegistry;

/// How long a cloud query waits for its answer by default.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Source of the objects a pod references. `Ok(None)` means "does not exist" (the kubelet's
/// `NotFound`, which `optional` references tolerate); any other failure is an `Err`.
pub trait PodObjects: Send + Sync + 'static {
    /// The configmap `ns/name`, or `None` if it does not exist.
    fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>>> + Send;

    /// The secret `ns/name`, or `None` if it does not exist.
    fn secret(&self, ns: &str, name: &str) -> impl Future<Output = Result<Option<Secret>>> + Send;

    /// A token of the pod's service account (`spec.serviceAccountName`, default `default`),
    /// bound to the pod (`boundObjectRef` kind `Pod`, name, uid) for `audiences` (empty: the
    /// API server's default) and `expiration_seconds`. The answer carries `status.token` and
    /// `status.expirationTimestamp`.
    fn service_account_token(
        &self,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> impl Future<Output = Result<TokenRequest>> + Send;

    /// The Services of namespace `ns` this node may see, for the kubelet's service
    /// environment variables (of `default` without a pod of this node there: only the
    /// master service `kubernetes`). A cloud that cannot answer is not an error: the last
    /// list known, or none (logged as a warning): offline, a container is not held back for
    /// them, where the kubelet waits for its first service list.
    fn services(&self, ns: &str) -> impl Future<Output = Result<Vec<Service>>> + Send;

    /// The `certificates.k8s.io/v1` ClusterTrustBundle `name`, or `None` if it does not
    /// exist (every node may read every bundle). A cloud that cannot answer is not an error
    /// when an earlier answer is known: that one stands in (offline autonomy).
    fn cluster_trust_bundle(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<ClusterTrustBundle>>> + Send;

    /// Every ClusterTrustBundle of `signer` (`spec.signerName`, `<domain>/<path>`), in no
    /// particular order; the caller applies a label selector. Offline as
    /// [`PodObjects::cluster_trust_bundle`].
    fn cluster_trust_bundles_of(
        &self,
        signer: &str,
    ) -> impl Future<Output = Result<Vec<ClusterTrustBundle>>> + Send;

    /// Creates `request`, a `certificates.k8s.io/v1` PodCertificateRequest for `pod` (the
    /// cloud adds the node's name and uid, the service account's uid and the pod as owner);
    /// returns the created request, with its generated name. Needs the cloud.
    fn create_pod_certificate_request(
        &self,
        pod: &Pod,
        request: PodCertificateRequest,
    ) -> impl Future<Output = Result<PodCertificateRequest>> + Send;

    /// The PodCertificateRequest `ns/name` with its status, or `None` when it does not exist
    /// (any more). Needs the cloud.
    fn pod_certificate_request(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PodCertificateRequest>>> + Send;
}

/// [`PodObjects`] over the MetaStore, with a cloud `query` (through edgehub) as fallback.
#[derive(Debug, Clone)]
pub struct StoreObjects {
    store: MetaStore,
    hub: EdgeHubHandle,
    queries: QueryRegistry,
    timeout: Duration,
}

impl StoreObjects {
    /// Reads `store`; queries the cloud through `hub`, whose answers metamanager hands to
    /// `queries` (pass [`verge_metamanager::MetaManager::queries`]). Queries time out after
    /// [`DEFAULT_QUERY_TIMEOUT`].
    pub fn new(store: MetaStore, hub: EdgeHubHandle, queries: QueryRegistry) -> Self {
        Self {
            store,
            hub,
            queries,
            timeout: DEFAULT_QUERY_TIMEOUT,
        }
    }

    /// The same with another query timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The object at `<ns>/<kind>/<name>`: stored copy, else the cloud's answer (stored with
    /// `upsert_if_newer`). A cloud `error` whose reason says "not found" is `Ok(None)`.
    async fn object<T: DeserializeOwned>(
        &self,
        ns: &str,
        kind: ResourceType,
        name: &str,
    ) -> Result<Option<T>> {
        let key = ResourceKey::new(ns, kind, name);
        let k = key.clone();
        if let Some(stored) = self.store.blocking(move |s| s.get(&k)).await? {
            return decode(&key, &stored.content).map(Some);
        }
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, Vec::new(), self.timeout)
            .await;
        let content = match answer {
            Ok(content) => content,
            Err(verge_metamanager::Error::QueryRefused { reason, .. }) if is_not_found(&reason) => {
                debug!(%key, %reason, "cloud: not found");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let object = decode(&key, &content)?;
        let meta: Metadata = decode(&key, &content)?;
        let uid = meta.metadata.uid.unwrap_or_default();
        let rv = meta.metadata.resource_version.unwrap_or_default();
        let k = key.clone();
        self.store
            .blocking(move |s| s.upsert_if_newer(&k, &uid, &rv, &content))
            .await?;
        Ok(Some(object))
    }
}

/// The identity of an object, read from its JSON.
#[derive(serde::Deserialize)]
struct Metadata {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Whether a cloud `error` reason is an API server `NotFound`.
fn is_not_found(reason: &str) -> bool {
    reason.contains("NotFound") || reason.contains(" not found")
}

fn decode<T: DeserializeOwned>(key: &ResourceKey, content: &[u8]) -> Result<T> {
    serde_json::from_slice(content).map_err(|source| Error::Decode {
        what: key.to_string(),
        source,
    })
}

/// The `authentication.k8s.io/v1` TokenRequest the kubelet sends for a projected
/// `serviceAccountToken`: bound to `pod` (apiVersion `v1`, kind `Pod`, name, uid).
pub fn token_request(pod: &Pod, audiences: Vec<String>, expiration_seconds: i64) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    }
}

/// The pod's service account: `spec.serviceAccountName`, default `default`.
pub fn service_account(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

impl PodObjects for StoreObjects {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
        self.object(ns, ResourceType::ConfigMap, name).await
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>> {
        self.object(ns, ResourceType::Secret, name).await
    }

    async fn service_account_token(
        &self,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> Result<TokenRequest> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let key = ResourceKey::new(ns, ResourceType::ServiceAccountToken, service_account(pod));
        let request = token_request(pod, audiences, expiration_seconds);
        let content = serde_json::to_vec(&request).map_err(|source| Error::Encode {
            what: "TokenRequest",
            source,
        })?;
        let answer = self
            .queries
            .query(&self.hub, Module::Edged, &key, content, self.timeout)
            .await?;
        decode(&key, &answer)
    }

    async fn services(&self, ns: &str) -> Result<Vec<Service>> {
        self.service_list(ns).await
    }

    async fn cluster_trust_bundle(&self, name: &str) -> Result<Option<ClusterTrustBundle>> {
        let key = ResourceKey::cluster(ResourceType::ClusterTrustBundle, name);
        let bundles = self.trust_bundle_list(key).await?;
        Ok(bundles
            .into_iter()
            .find(|b| b.metadata.name.as_deref() == Some(name)))
    }

    async fn cluster_trust_bundles_of(&self, signer: &str) -> Result<Vec<ClusterTrustBundle>> {
        let key = ResourceKey::trust_bundles_of(signer);
        let bundles = self.trust_bundle_list(key).await?;
        // Only the signer's, whatever the answer holds (a stale kept one included).
        Ok(bundles
            .into_iter()
            .filter(|b| b.spec.signer_name.as_deref() == Some(signer))
            .collect())
    }

    async fn create_pod_certificate_request(
        &self,
        pod: &Pod,
        request: PodCertificateRequest,
    ) -> Result<PodCertificateRequest> {
        self.create_pcr(pod, request).await
    }

    async fn pod_certificate_request(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<PodCertificateRequest>> {
        self.read_pcr(ns, name).await
    }
}

mod kept;
mod pod_certificates;
mod services;
mod trust_bundles;

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests;
