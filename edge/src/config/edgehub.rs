//! [`EdgeHubConfig`]: the `edgeHub:` section (KubeEdge `modules.edgeHub`): where cloudhub is,
//! how the node authenticates, reconnects, and how much it queues.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::edgehub::OutboxConfig;

/// How edgehub reaches cloudhub (YAML `edgeHub:`); every field optional.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EdgeHubConfig {
    /// cloudhub's EdgeHub address. Default `http://127.0.0.1:10000` (flag `--cloudhub`).
    pub server: String,
    /// Further cloudhub addresses, for deployments without a load-balancing Service (in
    /// Kubernetes, the Service address in `server` alone suffices). After a failed connect or
    /// an ended session, the next attempt goes to the next address of
    /// `[server] + serverAlternates`, round-robin; the reconnect backoff applies before every
    /// attempt (reset after a session that got its `Welcome`). Default none.
    pub server_alternates: Vec<String>,
    /// Bootstrap token sent in `EdgeHello`. Default empty (flag `--token`).
    pub token: String,
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
            server: "http://127.0.0.1:10000".to_owned(),
            server_alternates: Vec::new(),
            token: String::new(),
            connect_timeout: Duration::from_secs(10),
            reconnect_initial_backoff: Duration::from_secs(1),
            reconnect_max_backoff: Duration::from_secs(30),
            upstream_queue: 1024,
            downstream_queue: 1024,
            outbox: OutboxConfig::default(),
        }
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
