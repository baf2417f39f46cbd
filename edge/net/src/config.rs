//! The `network:` section of edgecore's configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Edge networking (YAML `network:`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NetworkConfig {
    /// Program the node's Service proxy (ClusterIP and NodePort Services with nftables).
    /// Default `true`. Needs the `nft` binary (Debian package `nftables`) and root.
    pub service_proxy: bool,
    /// The `nft` binary. Default `nft` (found on `PATH`).
    pub nft: PathBuf,
    /// Serve cluster DNS on the pod network's gateway, port 53 (the nameserver of pods with
    /// `dnsPolicy: ClusterFirst`). Default `true`.
    pub cluster_dns: bool,
    /// The cluster domain (the kubelet's `clusterDomain`). Default `cluster.local`.
    pub cluster_domain: String,
    /// Reach Service endpoints this node does not reach directly (cloud pods, other sites,
    /// the API server) through cloudhub while online (`EdgeHub.Dial`, TCP). Default `true`;
    /// `false`: such endpoints are left out and a Service with no others refuses at once.
    pub service_tunnel: bool,
    /// The Service tunnel's TCP port on the pod network's gateway. Default 15001.
    pub service_tunnel_port: u16,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            service_proxy: true,
            nft: PathBuf::from("nft"),
            cluster_dns: true,
            cluster_domain: "cluster.local".to_owned(),
            service_tunnel: true,
            service_tunnel_port: crate::services::tunnel::DEFAULT_PORT,
        }
    }
}
