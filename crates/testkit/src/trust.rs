//! Identities for tests and the quickstart on a real control plane: the Verge namespace and
//! the controllers' service accounts, and Kubernetes bootstrap-token Secrets in the format
//! kubeadm creates (`kube-system/bootstrap-token-<id>`, type `bootstrap.kubernetes.io/token`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

/// The namespace of Verge's cloud services, CA Secret and ConfigMap.
pub const VERGE_NAMESPACE: &str = "verge-system";

/// The service accounts cloudhub accepts as controllers by default.
pub const CONTROLLER_ACCOUNTS: [&str; 3] =
    ["edgecontroller", "devicecontroller", "fleetcontroller"];

/// Creates `obj` unless it exists (409 is success).
async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Creates the `verge-system` namespace and the controllers' service accounts if absent.
///
/// # Errors
/// The API server refuses.
pub async fn ensure_controller_accounts(client: &kube::Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(VERGE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    create_if_absent(&namespaces, &ns).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), VERGE_NAMESPACE);
    for name in CONTROLLER_ACCOUNTS {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        create_if_absent(&accounts, &sa).await?;
    }
    Ok(())
}

/// What a test token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `usage-bootstrap-authentication` and `usage-bootstrap-signing`, valid for `ttl`.
    Valid,
    /// Both usages, expired an hour ago.
    Expired,
    /// `usage-bootstrap-signing` only (no authentication).
    WrongUsage,
}

/// Creates a bootstrap-token Secret of `kind` valid for `ttl` and returns the token
/// `<id>.<secret>`.
///
/// # Errors
/// The API server refuses.
pub async fn create_bootstrap_token(
    client: &kube::Client,
    kind: TokenKind,
    ttl: Duration,
) -> anyhow::Result<String> {
    let token = verge_pki::BootstrapToken::generate();
    let expiration = match kind {
        TokenKind::Expired => SystemTime::now() - Duration::from_secs(3600),
        TokenKind::Valid | TokenKind::WrongUsage => SystemTime::now() + ttl,
    };
    let mut data = BTreeMap::from([
        ("token-id".to_owned(), token.id().to_owned()),
        ("token-secret".to_owned(), token.secret().to_owned()),
        (
            "expiration".to_owned(),
            chrono::DateTime::<chrono::Utc>::from(expiration)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
        ("usage-bootstrap-signing".to_owned(), "true".to_owned()),
        ("description".to_owned(), "Verge test token".to_owned()),
    ]);
    if kind != TokenKind::WrongUsage {
        data.insert(
            "usage-bootstrap-authentication".to_owned(),
            "true".to_owned(),
        );
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(token.secret_name()),
            namespace: Some("kube-system".to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".to_owned()),
        string_data: Some(data),
        ..Secret::default()
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(token.expose().to_string())
}

/// Deletes Node `name` if it exists and waits (up to 30 s) until it is gone: the operator's
/// step before a node joins anew under a name that already joined (cloudhub refuses a join
/// under an existing Node's name). Pods bound to it are left to the pod garbage collector.
///
/// # Errors
/// The API server refuses, or the Node is still there after 30 s.
pub async fn forget_node(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    if nodes.get_opt(name).await?.is_none() {
        return Ok(());
    }
    match nodes.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while nodes.get_opt(name).await?.is_some() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "Node {name} still exists 30 s after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The Verge CA that cloudhub keeps in `verge-system/verge-ca` (read with admin
/// credentials), for tests and benches that issue node certificates directly.
///
/// # Errors
/// The Secret is missing or does not hold a CA.
pub async fn verge_ca(client: &kube::Client) -> anyhow::Result<verge_pki::Ca> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), VERGE_NAMESPACE);
    let data = secrets.get("verge-ca").await?.data.unwrap_or_default();
    let text = |key: &str| -> anyhow::Result<String> {
        let bytes = data.get(key).map(|b| b.0.clone()).unwrap_or_default();
        Ok(String::from_utf8(bytes)?)
    };
    let key = verge_pki::PrivateKeyPem::new(text("tls.key")?);
    Ok(verge_pki::Ca::from_pem(&text("tls.crt")?, &key)?)
}

/// The pin of the Verge CA, `sha256:<hex>` (`verge_pki::ca_cert_hash`, kubeadm's
/// `--discovery-token-ca-cert-hash`), as an operator computes it from the ConfigMap
/// `verge-system/verge-ca` (key `ca.crt`) that cloudhub publishes before it serves: what an
/// edge joins with (`edgecore join --ca-cert-hash`, `edgeHub.caCertHash`), since cloudhub
/// offers token CA discovery only with `trust.tokenCaDiscovery`.
///
/// # Errors
/// The ConfigMap is missing (no cloudhub ran yet) or holds no certificate.
pub async fn verge_ca_hash(client: &kube::Client) -> anyhow::Result<String> {
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), VERGE_NAMESPACE);
    let pem = maps
        .get("verge-ca")
        .await?
        .data
        .and_then(|mut data| data.remove("ca.crt"))
        .ok_or_else(|| anyhow::anyhow!("ConfigMap {VERGE_NAMESPACE}/verge-ca has no ca.crt"))?;
    Ok(verge_pki::ca_cert_hash(&pem)?)
}

/// A mutual-TLS client configuration for node `node` with a certificate issued directly
/// from `ca` (what a join gives a node, without a CSR object).
///
/// # Errors
/// Issuing fails.
pub fn node_client_config(
    ca: &verge_pki::Ca,
    node: &str,
) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    let issued = ca.issue_client(
        &format!("system:node:{node}"),
        Some("system:nodes"),
        Duration::from_secs(24 * 3600),
    )?;
    let identity = verge_pki::ClientIdentity {
        cert_chain_pem: &issued.cert_pem,
        key_pem: &issued.key_pem,
    };
    Ok(std::sync::Arc::new(verge_pki::tls::client_config(
        ca.cert_pem(),
        Some(identity),
    )?))
}

/// The audience of ControllerHub tokens (cloudhub's `trust.controllerAudience` default).
pub const CONTROLLERHUB_AUDIENCE: &str = "verge-controllerhub";

/// A third party's controller identity: ServiceAccount `name` in `namespace` (created), and,
/// unless `groups` is empty, a ClusterRole `<namespace>-<name>` allowing verb `attach` on
/// `messagegroups.verge.io` named `groups` with its ClusterRoleBinding to the account (both
/// replaced if present). Returns a token of the account for ControllerHub (TokenRequest,
/// audience [`CONTROLLERHUB_AUDIENCE`], one hour).
///
/// # Errors
/// The API server refuses.
pub async fn third_party_controller(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    groups: &[&str],
) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::DeleteParams;
    use serde_json::json;

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    create_if_absent(&accounts, &account).await?;
    if !groups.is_empty() {
        let role_name = format!("{namespace}-{name}");
        let roles: Api<ClusterRole> = Api::all(client.clone());
        let _ = roles.delete(&role_name, &DeleteParams::default()).await;
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": role_name},
            "rules": [{
                "apiGroups": ["verge.io"],
                "resources": ["messagegroups"],
                "resourceNames": groups,
                "verbs": ["attach"],
            }],
        }))?;
        roles.create(&PostParams::default(), &role).await?;
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let _ = bindings.delete(&role_name, &DeleteParams::default()).await;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": role_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }))?;
        bindings.create(&PostParams::default(), &binding).await?;
    }
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [CONTROLLERHUB_AUDIENCE], "expirationSeconds": 3600},
    }))?;
    let status = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status;
    status
        .and_then(|s| s.token)
        .ok_or_else(|| anyhow::anyhow!("TokenRequest for {namespace}/{name} returned no token"))
}

/// How long the tokens [`service_account_credentials`] mints stay valid: longer than any
/// test run.
pub const SERVICE_ACCOUNT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// Credentials of service account `verge-system/<name>` written into `dir`, so that a test
/// runs a cloud service exactly as deployed (with its shipped RBAC, not the admin's): a
/// kubeconfig `<dir>/<name>.kubeconfig` with the control plane's server and CA and a token of
/// the account, and, for a controller, `<dir>/<name>.hub-token` holding a token for the
/// ControllerHub audience (`verge-controllerhub`, as the projected volume of the deployed
/// pods; the controllers' `cloudhubAuth.tokenFile`). Tokens are minted by TokenRequest with the
/// admin client and live [`SERVICE_ACCOUNT_TOKEN_TTL`]. Returns the two paths.
///
/// # Errors
/// The account does not exist, a TokenRequest fails or a file cannot be written.
pub async fn service_account_credentials(
    cp: &crate::ControlPlane,
    name: &str,
    dir: &std::path::Path,
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let api: Api<ServiceAccount> = Api::namespaced(cp.client().await?, VERGE_NAMESPACE);
    let mint = |audiences: Option<Vec<String>>| {
        let api = api.clone();
        async move {
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences,
                    expiration_seconds: Some(SERVICE_ACCOUNT_TOKEN_TTL.as_secs() as i64),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            };
            let answer = api
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .with_context(|| format!("TokenRequest for {VERGE_NAMESPACE}/{name}"))?;
            answer
                .status
                .and_then(|s| s.token)
                .filter(|t| !t.is_empty())
                .with_context(|| format!("no token for {VERGE_NAMESPACE}/{name}"))
        }
    };
    let token = mint(None).await?;
    let hub_token = mint(Some(vec!["verge-controllerhub".to_owned()])).await?;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: verge-test\n  cluster:\n    \
         server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    \
         token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: verge-test\n    \
         user: {name}\n    namespace: {VERGE_NAMESPACE}\ncurrent-context: {name}\n",
        server = cp.server_url(),
        ca = cp.ca_cert_path().display(),
    );
    let kubeconfig_path = dir.join(format!("{name}.kubeconfig"));
    let hub_token_path = dir.join(format!("{name}.hub-token"));
    crate::mosquitto::write_private(&kubeconfig_path, &kubeconfig)?;
    crate::mosquitto::write_private(&hub_token_path, &hub_token)?;
    Ok((kubeconfig_path, hub_token_path))
}
