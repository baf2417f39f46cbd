//! A real kubelet node attached to the test kit's control plane, so the cloud services run
//! as pods exactly as in a user's cluster.
//!
//! The node is kubelet and kube-proxy (iptables mode) of the control plane's pinned release
//! ([`crate::control_plane::K8S_VERSION`], built from the Kubernetes Go modules like the
//! control plane), containerd [`CONTAINERD_VERSION`] built from its Go module (kubelet 1.36+
//! needs containerd >= 2.0; Debian 12 has 1.6), and runc and the CNI plugins from Debian
//! ([`DEBIAN_PACKAGES`]). No registry is reachable, so the sandbox image [`PAUSE_IMAGE`] is
//! built locally (a static C program, `assets/pause/pause.c`) and every image a pod runs is
//! imported from the local Docker engine ([`KubeletNode::import_image`]).
//!
//! [`KubeletNodeConfig::up`] (or [`KubeletNode::start`]) starts the node as detached
//! processes, like the control plane, and waits until the Node is `Ready` and kube-proxy
//! has programmed the `kubernetes` Service; [`KubeletNode::stop`] (or
//! [`KubeletNodeConfig::down`], without a handle) removes every pod it ran and everything
//! it put on the host. Starting cleans the leftovers of a crashed run first.
//!
//! One node per host: kube-proxy's iptables chains, the CNI bridge and the `kubepods`
//! cgroups are host-wide. Each [`KubeletNodeConfig::run_dir`] holds one node (e.g. one for
//! the e2e tests' control plane, one for the quickstart's); starting a node while one of
//! another run directory runs fails, naming that directory (a dead one's leftovers are
//! removed instead). Starts and stops are serialized by `~/.cache/verge/run/kubelet-node.lock`.
//!
//! # Network
//!
//! ```text
//!  pods: the Node's spec.podCIDR, a /24 of 10.244.0.0/16 (CLUSTER_CIDR) allocated by
//!        kube-controller-manager ── bridge verge-cni0 (its .1; CNI bridge + host-local + portmap)
//!  Services 10.96.0.0/16 ── kube-proxy iptables DNAT, from pods and from the host
//!  kubernetes Service 10.96.0.1:443 ─► <ADVERTISE_ADDRESS>:<apiserver port> (verge-cp0)
//!  Node InternalIP = ADVERTISE_ADDRESS (kubelet serves there; NodePorts only there)
//! ```
//!
//! The CNI network is containerd's CNI config template (`conf_template`): once the Node
//! has its `spec.podCIDR`, kubelet passes it to containerd (CRI `UpdateRuntimeConfig`),
//! which renders the template with it into `cni/net.d/`; only then is the node's network
//! ready and the Node `Ready` ([`KubeletNode::pod_cidr`] is that CIDR).
//!
//! Docker sets the `FORWARD` policy to `DROP`; the chain `VERGE-NODE-FORWARD` (jumped to
//! first from `FORWARD`) accepts traffic from and to [`CLUSTER_CIDR`]. Pods do not get
//! masqueraded to the outside (no registry or outside service is reachable anyway).
//!
//! # This host
//!
//! cgroup v1 (hybrid) without systemd as PID 1: kubelet runs with `failCgroupV1: false` and
//! `cgroupDriver: cgroupfs`, containerd with `SystemdCgroup = false`. Eviction and image
//! garbage collection thresholds are relaxed so a host disk that other builds fill does not
//! evict the pods under test.
//!
//! # Layout
//!
//! * this module — [`KubeletNodeConfig`], constants;
//! * `build` — [`KubeletNodeConfig::ensure_built`], containerd from its Go module (kubelet
//!   and kube-proxy: [`crate::ControlPlaneConfig::ensure_node_built`]);
//! * `claim` — one node per host: the host lock and the owner file;
//! * `files` — certificates and kubeconfigs, writing the run directory;
//! * `configs` — the containerd, kubelet and kube-proxy configurations, the CNI config
//!   template;
//! * `launch` — starting the processes and waiting until the node is ready;
//! * `handle` — [`KubeletNode`];
//! * `images` — the pause image, importing Docker images into containerd;
//! * `teardown` — stopping: pods through the API, processes, host state;
//! * `host` — host state found without the node's help (pod processes, shims, mounts,
//!   cgroups), [`KubeletNodeConfig::leftovers`];
//! * `iptables` — deleting chains and rules with `iptables-save`/`iptables-restore`;
//! * `state` — `state.json`.
//!
//! # Run directory
//!
//! ```text
//! <run>/state.json  logs/<component>.log  pids/<component>.pid
//! <run>/pki/              ca.crt kubelet-client.* kubelet-server.* kube-proxy.*
//! <run>/*.kubeconfig      kubelet, kube-proxy
//! <run>/containerd.toml kubelet.yaml kube-proxy.yaml
//! <run>/cni/              conflist.template (containerd's CNI config template), net.d/ (the
//!                         network containerd renders from it), ipam/ (host-local's allocations)
//! <run>/containerd/       root/, state/, containerd.sock
//! <run>/kubelet/          kubelet --root-dir;  pod-logs/: podLogsDir
//! ```

mod build;
mod claim;
mod configs;
mod files;
mod handle;
mod host;
mod images;
mod iptables;
mod launch;
mod state;
mod teardown;

use std::path::PathBuf;
use std::time::Duration;

pub use handle::KubeletNode;

use crate::paths;

/// The containerd release built from its Go module (the newest v2 on the module proxy when
/// pinned).
pub const CONTAINERD_VERSION: &str = "2.4.2";

/// The default node name.
pub const NODE_NAME: &str = "verge-cloud-0";

// kube-proxy's `clusterCIDR` (traffic from there counts as cluster-internal) and the range
// the FORWARD chain accepts; the node's own pod CIDR is the `/24` of it in its Node's
// `spec.podCIDR` ([`KubeletNode::pod_cidr`]).
pub use crate::control_plane::CLUSTER_CIDR;

/// The CNI bridge link.
pub const CNI_BRIDGE: &str = "verge-cni0";

/// The CNI network name (containerd's CNI config).
pub const CNI_NETWORK: &str = "verge-pods";

/// The pod sandbox image, built locally and pinned in containerd (`docker.io/` prefixed there).
pub const PAUSE_IMAGE: &str = "verge-test/pause:3.10";

/// Debian packages the node needs: runc, the CNI plugins (`/usr/lib/cni`), conntrack,
/// iptables (kube-proxy) and iproute2.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "runc",
    "containernetworking-plugins",
    "conntrack",
    "iptables",
    "iproute2",
];

/// Where Debian's `containernetworking-plugins` installs the plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The processes, in start order (also their log and pid file names).
const COMPONENTS: &[&str] = &["containerd", "kubelet", "kube-proxy"];

/// Where and how to run the kubelet node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletNodeConfig {
    /// Node name (also the kubelet's hostname override). Default [`NODE_NAME`].
    pub name: String,
    /// Run directory (layout in the [module docs](self)), the node's own: starting and
    /// stopping delete its contents. Default `$VERGE_NODE_DIR`, else
    /// `~/.cache/verge/run/kubelet-node`.
    pub run_dir: PathBuf,
    /// containerd build cache (`bin/`, `complete`). Default
    /// `~/.cache/verge/containerd/v<CONTAINERD_VERSION>`.
    pub containerd_cache_dir: PathBuf,
    /// How long [`KubeletNodeConfig::up`] waits for the Node to be `Ready`. Default 120 s.
    pub ready_timeout: Duration,
    /// How long stopping waits for the kubelet to terminate the node's pods before it
    /// kills what is left. Default 60 s.
    pub drain_timeout: Duration,
}

impl Default for KubeletNodeConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

impl KubeletNodeConfig {
    /// The defaults documented on the fields.
    pub fn from_env() -> Self {
        let run_dir = std::env::var_os("VERGE_NODE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| paths::run_dir().join("kubelet-node"));
        Self {
            name: NODE_NAME.to_owned(),
            run_dir,
            containerd_cache_dir: paths::verge_home()
                .join("containerd")
                .join(format!("v{CONTAINERD_VERSION}")),
            ready_timeout: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(60),
        }
    }

    /// `<containerd cache>/bin`: containerd, containerd-shim-runc-v2, ctr.
    pub fn containerd_bin_dir(&self) -> PathBuf {
        self.containerd_cache_dir.join("bin")
    }

    /// containerd's gRPC socket, `<run>/containerd/containerd.sock`.
    pub fn containerd_socket(&self) -> PathBuf {
        self.run_dir.join("containerd").join("containerd.sock")
    }

    /// `<run>/logs/<component>.log` (`containerd`, `kubelet`, `kube-proxy`).
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.run_dir.join("logs").join(format!("{component}.log"))
    }

    /// Stops the node of [`KubeletNodeConfig::run_dir`], if any, without a handle (e.g.
    /// after a crashed test, or from xtask): what [`KubeletNode::stop`] does, driven by
    /// `state.json` (pods and the Node object are removed through the control plane
    /// recorded there, if it still answers). Returns whether a node process was running.
    ///
    /// # Errors
    /// A process survives SIGKILL, or host state (mounts, links, iptables) cannot be
    /// removed.
    pub async fn down(&self) -> anyhow::Result<bool> {
        let _lock = claim::lock_host().await?;
        teardown::teardown(self, None).await
    }
}
