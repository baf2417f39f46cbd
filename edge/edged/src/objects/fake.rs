//! An in-memory [`PodObjects`] for unit tests.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestStatus};
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
}
