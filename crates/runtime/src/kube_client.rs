//! The Kubernetes client of the cloud services (feature `kube`).

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client from the kubeconfig at `kubeconfig`, or without one from `KUBECONFIG`,
/// `~/.kube/config` or the in-cluster service account (kube-rs `Client::try_default`).
///
/// # Errors
/// The file cannot be read or is invalid, or no configuration is found.
pub async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let Some(path) = kubeconfig else {
        return kube::Client::try_default()
            .await
            .context("no Kubernetes configuration found");
    };
    let file = Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("invalid kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("cannot build the Kubernetes client")
}
