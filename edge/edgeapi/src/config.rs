//! The `edgeApi:` section of edgecore's configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The edge API's default port on the pod network's gateway (`edgeApi.port`).
pub const DEFAULT_PORT: u16 = 15443;

/// The edge API (YAML `edgeApi:`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EdgeApiConfig {
    /// Serve the Kubernetes API to the node's pods at the `kubernetes` Service. Default
    /// `true`; it needs the Service proxy (`network.serviceProxy`), which redirects the
    /// Service to it. `false`: the Service is proxied like any other (through cloudhub to
    /// the API server while online, refused offline) and pods trust only the cluster CA.
    pub enable: bool,
    /// Its TCP port on the pod network's gateway. Default 15443.
    pub port: u16,
    /// The most bytes of the API server's answers kept for offline reads (in
    /// `<dataDir>/edge-api/cache.redb`); the least recently used go first. Default 64 MiB.
    pub cache_bytes: usize,
    /// How old an authorization decision of the API server may be and still allow a request
    /// offline. Default `24h`.
    #[serde(with = "humantime_serde")]
    pub decision_max_age: Duration,
}

impl Default for EdgeApiConfig {
    fn default() -> Self {
        Self {
            enable: true,
            port: DEFAULT_PORT,
            cache_bytes: 64 * 1024 * 1024,
            decision_max_age: Duration::from_secs(24 * 3600),
        }
    }
}
