//! The Verge CA in the cluster: a `kubernetes.io/tls` Secret `<namespace>/<caName>` that the
//! first cloudhub creates when none exists (or that the operator supplies), and a ConfigMap of
//! the same name publishing the CA certificate (`ca.crt`) for controllers, like the
//! `kube-root-ca.crt` ConfigMap of every namespace.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tracing::info;
use verge_pki::{Ca, PrivateKeyPem};

use super::{TrustConfig, TrustError};

/// Key of the CA certificate in the ConfigMap.
pub const CA_CERT_KEY: &str = "ca.crt";

/// Reads the CA Secret, creating it (and the namespace) when absent, and publishes its
/// certificate in the ConfigMap. Replicas starting together race benignly: a create that
/// finds the Secret already there (409) reads the winner's.
///
/// # Errors
/// [`TrustError::Cluster`] for API errors, [`TrustError::BadCaSecret`] when the Secret
/// exists but holds no usable CA.
pub async fn load_or_create(client: &kube::Client, config: &TrustConfig) -> Result<Ca, TrustError> {
    ensure_namespace(client, &config.namespace).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let ca = match secrets.get_opt(&config.ca_name).await? {
        Some(secret) => ca_from_secret(&secret, config)?,
        None => {
            let ca = Ca::generate("verge-ca", config.ca_validity)?;
            match secrets
                .create(&PostParams::default(), &ca_secret(&ca, config))
                .await
            {
                Ok(_) => {
                    info!(namespace = %config.namespace, name = %config.ca_name, "created the Verge CA");
                    ca
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let secret = secrets.get(&config.ca_name).await?;
                    ca_from_secret(&secret, config)?
                }
                Err(error) => return Err(error.into()),
            }
        }
    };
    publish(client, config, ca.cert_pem()).await?;
    Ok(ca)
}

/// Creates `namespace` unless it exists.
async fn ensure_namespace(client: &kube::Client, namespace: &str) -> Result<(), TrustError> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(namespace).await?.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// The Secret holding `ca`.
fn ca_secret(ca: &Ca, config: &TrustConfig) -> Secret {
    let data = BTreeMap::from([
        (
            "tls.crt".to_owned(),
            ByteString(ca.cert_pem().as_bytes().to_vec()),
        ),
        (
            "tls.key".to_owned(),
            ByteString(ca.key_pem().expose().as_bytes().to_vec()),
        ),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(config.ca_name.clone()),
            namespace: Some(config.namespace.clone()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The CA in `secret`.
fn ca_from_secret(secret: &Secret, config: &TrustConfig) -> Result<Ca, TrustError> {
    let bad = |reason: String| TrustError::BadCaSecret {
        secret: format!("{}/{}", config.namespace, config.ca_name),
        reason,
    };
    let data = secret
        .data
        .as_ref()
        .ok_or_else(|| bad("it has no data".to_owned()))?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|ByteString(v)| String::from_utf8(v.clone()).ok())
            .ok_or_else(|| bad(format!("it has no UTF-8 {key}")))
    };
    let cert = text("tls.crt")?;
    let key = PrivateKeyPem::new(text("tls.key")?);
    Ca::from_pem(&cert, &key).map_err(|e| bad(e.to_string()))
}

/// Writes the CA certificate into the ConfigMap (server-side apply: idempotent).
async fn publish(
    client: &kube::Client,
    config: &TrustConfig,
    cert_pem: &str,
) -> Result<(), TrustError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": config.ca_name, "namespace": config.namespace },
        "data": { CA_CERT_KEY: cert_pem },
    });
    api.patch(
        &config.ca_name,
        &PatchParams::apply("verge-cloudhub").force(),
        &Patch::Apply(cm),
    )
    .await?;
    Ok(())
}
