//! How a controller proves who it is to cloudhub and checks who cloudhub is: the Verge CA
//! from the ConfigMap cloudhub publishes (or a file), and a service-account token for the
//! ControllerHub audience (a file such as a projected token, or one requested through the
//! TokenRequest API and renewed at 80 % of its life), sent as `authorization: Bearer` on
//! every attach (checked by cloudhub with a TokenReview).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use rustls::ClientConfig;
use tokio::sync::Mutex;

use crate::config::HubAuthConfig;
use crate::{Error, Identity, Result};

/// Lifetime asked for requested tokens, seconds (the API server's minimum is 600).
const TOKEN_SECONDS: i64 = 3600;

/// The CA and token source, shared by every replica link.
pub struct HubAuth {
    config: HubAuthConfig,
    /// `namespace/name` of the service account whose token is requested.
    service_account: String,
    client: kube::Client,
    token: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for HubAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubAuth")
            .field("config", &self.config)
            .field("service_account", &self.service_account)
            .finish_non_exhaustive()
    }
}

/// `namespace/name` split, or the whole string as a name in `verge-system`.
fn split(reference: &str) -> (&str, &str) {
    reference
        .split_once('/')
        .unwrap_or(("verge-system", reference))
}

impl HubAuth {
    /// A source configured by `config` for the controller `identity` (whose service
    /// account is the default), reading the cluster through `client`.
    pub fn new(config: &HubAuthConfig, identity: &Identity, client: kube::Client) -> Arc<Self> {
        Arc::new(Self {
            service_account: config.service_account_for(identity),
            config: config.clone(),
            client,
            token: Mutex::new(None),
        })
    }

    /// A TLS client configuration trusting the Verge CA (read anew, so a replaced CA is
    /// picked up at the next attach).
    ///
    /// # Errors
    /// [`Error::HubAuth`] when the CA cannot be read or parsed.
    pub async fn tls(&self) -> Result<Arc<ClientConfig>> {
        let ca_pem = match &self.config.ca_file {
            Some(path) => std::fs::read_to_string(path).map_err(|source| Error::HubAuth {
                what: "read the CA file",
                source: Box::new(source),
            })?,
            None => {
                let (namespace, name) = split(&self.config.ca_config_map);
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                let cm = api.get(name).await.map_err(|source| Error::HubAuth {
                    what: "read the Verge CA ConfigMap",
                    source: Box::new(source),
                })?;
                cm.data
                    .and_then(|mut d| d.remove("ca.crt"))
                    .ok_or_else(|| Error::HubAuth {
                        what: "find ca.crt in the Verge CA ConfigMap",
                        source: "key missing".into(),
                    })?
            }
        };
        let config =
            verge_pki::tls::client_config(&ca_pem, None).map_err(|source| Error::HubAuth {
                what: "use the Verge CA",
                source: Box::new(source),
            })?;
        Ok(Arc::new(config))
    }

    /// The bearer token for the next attach.
    ///
    /// # Errors
    /// [`Error::HubAuth`] when the file cannot be read or the TokenRequest fails.
    pub async fn token(&self) -> Result<String> {
        if let Some(path) = &self.config.token_file {
            return std::fs::read_to_string(path)
                .map(|t| t.trim().to_owned())
                .map_err(|source| Error::HubAuth {
                    what: "read the token file",
                    source: Box::new(source),
                });
        }
        let mut cached = self.token.lock().await;
        if let Some((token, renew_at)) = cached.as_ref()
            && Instant::now() < *renew_at
        {
            return Ok(token.clone());
        }
        let (namespace, name) = split(&self.service_account);
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec![self.config.audience.clone()]),
                expiration_seconds: Some(TOKEN_SECONDS),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|source| Error::HubAuth {
                what: "request a service-account token",
                source: Box::new(source),
            })?;
        let token = answer.status.and_then(|s| s.token).unwrap_or_default();
        let life = Duration::from_secs(TOKEN_SECONDS.unsigned_abs() * 4 / 5);
        *cached = Some((token.clone(), Instant::now() + life));
        Ok(token)
    }
}
