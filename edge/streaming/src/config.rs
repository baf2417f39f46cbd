//! [`StreamingConfig`]: the kubelet streaming API edgecore serves for kubectl logs, exec,
//! attach and port-forward through cloudhub (architecture.md §10).

use serde::{Deserialize, Serialize};

/// Streaming settings (YAML `streaming:`); every field optional.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct StreamingConfig {
    /// Whether edgecore answers cloudhub's tunnel requests. Default true.
    pub enable: bool,
    /// The port advertised as the node's `daemonEndpoints.kubeletEndpoint.port`, which the
    /// API server dials (through cloudhub; edgecore opens no listening port for it).
    /// Default 10250 (the kubelet's).
    pub port: u16,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        Self {
            enable: true,
            port: 10250,
        }
    }
}
