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
