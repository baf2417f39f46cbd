//! metrics-server for tests: the pinned release ([`VERSION`]) built from its Go module,
//! imported as an image into the kit's kubelet node and deployed there from the release's
//! own manifests (`manifests/base` of the module, applied unmodified through a kustomize
//! overlay), so `kubectl top` and the HorizontalPodAutoscaler work with edge nodes as with
//! kubelets.
//!
//! metrics-server reaches every node through cloudhub, securely (docs/install.md "Resource
//! metrics"): `HTTPS_PROXY` names a cloudhub streams listener (in the kit, the streams
//! front), so each scrape of `https://<node address>:<port>/metrics/resource` is a `CONNECT`
//! that cloudhub tunnels to the edge holding the session (or dials, for the kubelet node);
//! it verifies nodes (and the proxy) with the cluster CA (`--kubelet-certificate-authority`,
//! no `--kubelet-insecure-tls`) and presents a client certificate of its own
//! ([`CLIENT_NAME`]) that edges and the kubelet accept. It prefers the `Hostname` address,
//! which for an edge is its stream address (`verge_pki::stream_address`).
//!
//! # Layout
//! * this module — [`MetricsServerConfig`], constants;
//! * `build` — the binary (`assets/metrics-server/build.sh`) and the image;
//! * `deploy` — [`deploy`]: the client certificate, the overlay, the wait for the
//!   `v1beta1.metrics.k8s.io` APIService.

mod build;
mod deploy;

use std::path::PathBuf;

pub use build::build_script;
pub use deploy::{SECURE_PORT, client_certificate, deploy, remove};

use crate::paths;

/// The pinned metrics-server release (the newest approved on the Go module proxy).
pub const VERSION: &str = "0.8.0";

/// The image the release's manifests name; the locally built image is tagged with it.
pub const IMAGE: &str = "registry.k8s.io/metrics-server/metrics-server:v0.8.0";

/// The subject common name of metrics-server's kubelet client certificate: cloudhub's
/// `streams.clientNames` and `streams.kubeletClientNames` in the kit list it, and RBAC grants
/// it `nodes/metrics` for the kit's kubelet.
pub const CLIENT_NAME: &str = "metrics-server";

/// Where the binary is built.
#[derive(Debug, Clone)]
pub struct MetricsServerConfig {
    /// The release, e.g. `0.8.0`.
    pub version: String,
    /// `~/.cache/verge/metrics-server/v<version>`: `bin/metrics-server`, the `complete` stamp.
    pub cache_dir: PathBuf,
}

impl Default for MetricsServerConfig {
    fn default() -> Self {
        Self {
            version: VERSION.to_owned(),
            cache_dir: paths::verge_home()
                .join("metrics-server")
                .join(format!("v{VERSION}")),
        }
    }
}

impl MetricsServerConfig {
    /// The built binary.
    pub fn binary(&self) -> PathBuf {
        self.cache_dir.join("bin").join("metrics-server")
    }
}
