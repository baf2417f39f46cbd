//! An in-memory [`PodObjects`] for unit tests.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestStatus};
use k8s_openapi::api::certificates::v1::{ClusterTrustBundle, PodCertificateRequest};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{PodObjects, token_request};
use crate::Result;

/// Configmaps and secrets by `(namespace, name)`; services by namespace; tokens `token-<n>` counted from 1, expiring
/// `expiration_seconds` after the fake's clock (`now_s`, seconds since the epoch).
#[derive(Debug, Default)]
pub struct FakeObjects {
    pub config_maps: Mutex<HashMap<(String, String), ConfigMap>>,
    pub secrets: Mutex<HashMap<(String, String), Secret>>,
    pub services: Mutex<HashMap<String, Vec<Service>>>,
    pub tokens_issued: Mutex<u32>,
    pub now_s: Mutex<i64>,
    /// When set, token requests fail (as with the cloud unreachable).
    pub fail_tokens: Mutex<bool>,
    /// ClusterTrustBundles, by name.
    pub trust_bundles: Mutex<HashMap<String, ClusterTrustBundle>>,
    /// How many ClusterTrustBundle reads were made (by name or by signer).
    pub trust_bundle_reads: Mutex<u32>,
    /// When set, ClusterTrustBundle reads fail (as with the cloud unreachable, nothing kept).
    pub fail_trust_bundles: Mutex<bool>,
    /// PodCertificateRequests created, by name (`req-<n>`, counted from 1); tests issue,
    /// deny or delete them.
    pub pcrs: Mutex<HashMap<String, PodCertificateRequest>>,
    /// How many PodCertificateRequests were created.
    pub pcrs_created: Mutex<u32>,
    /// When set, PodCertificateRequest calls fail (as with the cloud unreachable).
    pub fail_pcrs: Mutex<bool>,
}

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_owned(), name.to_owned())
}

impl FakeObjects {
    /// Stores a configmap from its JSON (namespace and name taken from its metadata).
    pub fn put_config_map(&self, json: serde_json::Value) {
        let cm: ConfigMap = serde_json::from_value(json).expect("configmap");
        let k = key(
            cm.metadata.namespace.as_deref().unwrap_or("default"),
            cm.metadata.name.as_deref().unwrap_or_default(),
        );
        self.config_maps.lock().expect("lock").insert(k, cm);
    }

    /// Stores a secret from its JSON (namespace and name taken from its metadata).
    pub fn put_secret(&self, json: serde_json::Value) {
        let s: Secret = serde_json::from_value(json).expect("secret");
        let k = key(
            s.metadata.namespace.as_deref().unwrap_or("default"),
            s.metadata.name.as_deref().unwrap_or_default(),
        );
        self.secrets.lock().expect("lock").insert(k, s);
    }

    /// Stores a ClusterTrustBundle from its JSON (replacing one of the same name).
    pub fn put_trust_bundle(&self, json: serde_json::Value) {
        let b: ClusterTrustBundle = serde_json::from_value(json).expect("clustertrustbundle");
        let name = b.metadata.name.clone().unwrap_or_default();
        self.trust_bundles.lock().expect("lock").insert(name, b);
    }

    /// Sets the status of the request `name` from its JSON.
    pub fn set_pcr_status(&self, name: &str, status: serde_json::Value) {
        let mut pcrs = self.pcrs.lock().expect("lock");
        let pcr = pcrs.get_mut(name).expect("a created request");
        pcr.status = Some(serde_json::from_value(status).expect("status"));
    }

    fn pcr_call(&self) -> Result<()> {
        if *self.fail_pcrs.lock().expect("lock") {
            return Err(crate::Error::EdgeHub(verge_edgehub::Error::HubStopped));
        }
        Ok(())
    }

    /// Counts a ClusterTrustBundle read; fails it when `fail_trust_bundles` is set.
    fn trust_bundle_read(&self) -> Result<()> {
        *self.trust_bundle_reads.lock().expect("lock") += 1;
        if *self.fail_trust_bundles.lock().expect("lock") {
            return Err(crate::Error::EdgeHub(verge_edgehub::Error::HubStopped));
        }
        Ok(())
    }

    /// Adds a service from its JSON (to the list of its namespace).
    pub fn put_service(&self, json: serde_json::Value) {
        let s: Service = serde_json::from_value(json).expect("service");
        let ns = s
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        self.services
            .lock()
            .expect("lock")
            .entry(ns)
            .or_default()
            .push(s);
    }
}

impl PodObjects for FakeObjects {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
        Ok(self
            .config_maps
            .lock()
            .expect("lock")
            .get(&key(ns, name))
            .cloned())
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>> {
        Ok(self
            .secrets
            .lock()
            .expect("lock")
            .get(&key(ns, name))
            .cloned())
    }

    async fn service_account_token(
        &self,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> Result<TokenRequest> {
        if *self.fail_tokens.lock().expect("lock") {
            return Err(crate::Error::EdgeHub(verge_edgehub::Error::HubStopped));
        }
        let n = {
            let mut issued = self.tokens_issued.lock().expect("lock");
            *issued += 1;
            *issued
        };
        let now = *self.now_s.lock().expect("lock");
        let expires = k8s_openapi::jiff::Timestamp::from_second(now + expiration_seconds)
            .ok()
            .map(Time);
        let mut tr = token_request(pod, audiences, expiration_seconds);
        tr.status = Some(TokenRequestStatus {
            token: Some(format!("token-{n}")),
            expiration_timestamp: expires,
        });
        Ok(tr)
    }

    async fn services(&self, ns: &str) -> Result<Vec<Service>> {
        Ok(self
            .services
            .lock()
            .expect("lock")
            .get(ns)
            .cloned()
            .unwrap_or_default())
    }

    async fn cluster_trust_bundle(&self, name: &str) -> Result<Option<ClusterTrustBundle>> {
        self.trust_bundle_read()?;
        Ok(self.trust_bundles.lock().expect("lock").get(name).cloned())
    }

    async fn cluster_trust_bundles_of(&self, signer: &str) -> Result<Vec<ClusterTrustBundle>> {
        self.trust_bundle_read()?;
        Ok(self
            .trust_bundles
            .lock()
            .expect("lock")
            .values()
            .filter(|b| b.spec.signer_name.as_deref() == Some(signer))
            .cloned()
            .collect())
    }

    async fn create_pod_certificate_request(
        &self,
        pod: &Pod,
        mut request: PodCertificateRequest,
    ) -> Result<PodCertificateRequest> {
        self.pcr_call()?;
        let n = {
            let mut created = self.pcrs_created.lock().expect("lock");
            *created += 1;
            *created
        };
        request.metadata.name = Some(format!("req-{n}"));
        request.metadata.namespace = pod.metadata.namespace.clone();
        let name = format!("req-{n}");
        self.pcrs
            .lock()
            .expect("lock")
            .insert(name, request.clone());
        Ok(request)
    }

    async fn pod_certificate_request(
        &self,
        _ns: &str,
        name: &str,
    ) -> Result<Option<PodCertificateRequest>> {
        self.pcr_call()?;
        Ok(self.pcrs.lock().expect("lock").get(name).cloned())
    }
}
