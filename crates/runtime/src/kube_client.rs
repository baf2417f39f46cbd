//! The Kubernetes client of the cloud services (feature `kube`).

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client from the kubeconfig at `kubeconfig`, or without one from `KUBECONFIG`,
/// `~/.kube/config` or the in-cluster service account (kube-rs `Config::infer`). With
/// feature `metrics` every request is timed and counted ([`crate::metrics::kube_api`]).
///
/// # Errors
/// The file cannot be read or is invalid, or no configuration is found.
pub async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let Some(path) = kubeconfig else {
        let config = kube::Config::infer()
            .await
            .context("no Kubernetes configuration found")?;
        return build(config);
    };
    let file = Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("invalid kubeconfig {}", path.display()))?;
    build(config)
}

/// The client of `config`; with feature `metrics` its requests are recorded in
/// [`crate::metrics::kube_api::global`].
fn build(config: kube::Config) -> anyhow::Result<kube::Client> {
    let builder = kube::client::ClientBuilder::try_from(config)
        .context("cannot build the Kubernetes client")?;
    #[cfg(feature = "metrics")]
    let builder = builder.with_layer(&crate::metrics::kube_api::global().layer());
    Ok(builder.build())
}

/// The Kubernetes user name of node `node`: `system:node:<node>`, as in a kubelet's client
/// certificate (the Node authorizer and NodeRestriction admission know nodes by it).
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// A client acting as node `node` through `base`: every request carries
/// `Impersonate-User: system:node:<node>` and nothing else of impersonation, which is
/// Kubernetes' constrained impersonation of an arbitrary node (KEP-5284, beta and on by
/// default since 1.36). The API server then fixes the groups to `system:nodes` and
/// `system:authenticated`, so the Node authorizer and NodeRestriction admission bound what the
/// request may do to what that node's kubelet could do.
///
/// `base` needs the verb `impersonate:arbitrary-node` on `nodes` of API group
/// `authentication.k8s.io`, and `impersonate-on:arbitrary-node:<verb>` on each resource it
/// touches this way (see `deploy/cloud/access/rbac.yaml`). The new client shares `base`'s
/// connection pool, credentials and layers (its requests go through `base`); building it
/// spawns one small buffer task, so keep one per node rather than one per request.
///
/// # Errors
/// A request fails with [`kube::Error::Api`] 403 when either identity is not allowed; an
/// invalid node name (not a valid header value) fails each request with
/// [`kube::Error::Service`].
pub fn as_node(base: &kube::Client, node: &str) -> kube::Client {
    let user = http::HeaderValue::from_str(&node_user(node)).ok();
    let base = base.clone();
    let namespace = base.default_namespace().to_owned();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let (base, user) = (base.clone(), user.clone());
        async move {
            let user = user.ok_or_else(|| {
                kube::Error::Service("a node name that is not a valid header value".into())
            })?;
            let headers = request.headers_mut();
            // Only the user: any group or extra would fall back to legacy impersonation.
            headers.remove(IMPERSONATE_GROUP);
            headers.insert(IMPERSONATE_USER, user);
            base.send(request).await
        }
    });
    kube::Client::new(service, namespace)
}

const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
