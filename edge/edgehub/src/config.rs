//! [`EdgeHubConfig`]: the `edgeHub:` section (KubeEdge `modules.edgeHub`): where cloudhub is,
//! how the node authenticates, reconnects, and how much it queues.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::OutboxConfig;

/// What edgehub and the node's certificates read of edgecore's configuration: the node's
/// name, its data directory (the key and certificates live in `<dataDir>/pki`) and the
/// `edgeHub:` section. edgecore owns the file and builds this from it.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    /// The node's name (`nodeName`): the CommonName of its certificate, `system:node:<name>`.
    pub node_name: String,
    /// edgecore's data directory (`dataDir`).
    pub data_dir: PathBuf,
    /// The `edgeHub:` section.
    pub edge_hub: EdgeHubConfig,
}

/// How edgehub reaches cloudhub (YAML `edgeHub:`); every field optional.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EdgeHubConfig {
    /// cloudhub's EdgeHub address (mutual TLS with the node certificate from
    /// `<dataDir>/pki`). Default `https://127.0.0.1:10000` (flag `--cloudhub`).
    pub server: String,
    /// Further cloudhub addresses, for deployments without a load-balancing Service (in
    /// Kubernetes, the Service address in `server` alone suffices). After a failed connect or
    /// an ended session, the next attempt goes to the next address of
    /// `[server] + serverAlternates`, round-robin; the reconnect backoff applies before every
    /// attempt (reset after a session that got its `Welcome`). Default none.
    pub server_alternates: Vec<String>,
    /// A Kubernetes bootstrap token (`<id>.<secret>`): when set, edgecore joins on start if
    /// it has no valid node certificate (as `edgecore join` does). Never logged. Default
    /// empty (flag `--token`).
    pub token: String,
    /// cloudhub's Join service for those joins. Default: `server`'s host on port 10002.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_server: Option<String>,
    /// Pin of the Verge CA for joins, `sha256:<hex>` of its public key (kubeadm's
    /// `--discovery-token-ca-cert-hash`; docs/install.md shows how to compute it). Default
    /// none: the CA is then fetched with the token's MAC over it, which cloudhub offers only
    /// with `trust.tokenCaDiscovery` (off by default), so set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert_hash: Option<String>,
    /// The name cloudhub's serving certificate is verified against, instead of the host of
    /// `server` (kubeconfig's `tls-server-name`), e.g. when cloudhub is reached through an
    /// address its certificate does not list. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// Bound on establishing a session: TCP/HTTP2 connect, and again for the `Welcome`.
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// First reconnect delay; doubles per failed attempt. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_initial_backoff: Duration,
    /// Largest reconnect delay. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_backoff: Duration,
    /// Capacity of the upstream queue (messages waiting for the stream). Default 1024.
    pub upstream_queue: usize,
    /// Capacity of the downstream queue (messages waiting for metamanager). Default 1024.
    pub downstream_queue: usize,
    /// The upstream outbox's bounds and retry policy (`maxEntries`, `maxInflight`,
    /// `maxAttempts`, ...). Default: see [`OutboxConfig`].
    pub outbox: OutboxConfig,
}

impl Default for EdgeHubConfig {
    fn default() -> Self {
        Self {
            server: "https://127.0.0.1:10000".to_owned(),
            server_alternates: Vec::new(),
            token: String::new(),
            join_server: None,
            ca_cert_hash: None,
            tls_server_name: None,
            connect_timeout: Duration::from_secs(10),
            reconnect_initial_backoff: Duration::from_secs(1),
            reconnect_max_backoff: Duration::from_secs(30),
            upstream_queue: 1024,
            downstream_queue: 1024,
            outbox: OutboxConfig::default(),
        }
    }
}

/// Like a derived `Debug`, with the bootstrap token redacted.
impl std::fmt::Debug for EdgeHubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = if self.token.is_empty() {
            ""
        } else {
            "<redacted>"
        };
        f.debug_struct("EdgeHubConfig")
            .field("server", &self.server)
            .field("server_alternates", &self.server_alternates)
            .field("token", &token)
            .field("join_server", &self.join_server)
            .field("ca_cert_hash", &self.ca_cert_hash)
            .field("tls_server_name", &self.tls_server_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_initial_backoff", &self.reconnect_initial_backoff)
            .field("reconnect_max_backoff", &self.reconnect_max_backoff)
            .field("upstream_queue", &self.upstream_queue)
            .field("downstream_queue", &self.downstream_queue)
            .field("outbox", &self.outbox)
            .finish()
    }
}

impl EdgeHubConfig {
    /// Checks values that serde cannot.
    ///
    /// # Errors
    /// The first bad field (its full YAML path) and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let bad = |field, reason: &str| Err((field, reason.to_owned()));
        if self.server.is_empty() {
            return bad("edgeHub.server", "must name cloudhub's address");
        }
        for (field, d) in [
            (
                "edgeHub.reconnectInitialBackoff",
                self.reconnect_initial_backoff,
            ),
            ("edgeHub.connectTimeout", self.connect_timeout),
        ] {
            if d.is_zero() {
                return bad(field, "must be greater than zero");
            }
        }
        if self.reconnect_max_backoff < self.reconnect_initial_backoff {
            return bad(
                "edgeHub.reconnectMaxBackoff",
                "must be at least reconnectInitialBackoff",
            );
        }
        if self.upstream_queue == 0 {
            return bad("edgeHub.upstreamQueue", "must hold at least one message");
        }
        if self.downstream_queue == 0 {
            return bad("edgeHub.downstreamQueue", "must hold at least one message");
        }
        self.outbox
            .validate()
            .map_err(|(field, reason)| (field, reason.to_owned()))
    }
}
