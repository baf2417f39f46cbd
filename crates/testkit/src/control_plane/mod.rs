//! A real Kubernetes control plane for tests: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of one pinned release.
//!
//! [`ControlPlaneConfig::ensure_built`] builds the binaries once into a cache outside
//! the repository; [`ControlPlaneConfig::up`] starts them as detached processes that
//! outlive the caller (so every test binary of a run shares one control plane) and
//! returns a [`ControlPlane`] handle; [`ControlPlaneConfig::down`] stops them.
//!
//! # Layout
//!
//! * this module — [`ControlPlaneConfig`], [`ControlPlaneConfig::up`] / `status` / `down`;
//! * `build` — building the binaries from the Go modules ([`build_script`]);
//! * `certs` — the CA, serving certificates and service-account keys;
//! * `launch` — starting the components and waiting until the API server serves;
//! * `handle` — [`ControlPlane`], the handle of a running control plane;
//! * `link` — the advertise address pods reach the API server at ([`ADVERTISE_ADDRESS`]);
//! * `state` — `state.json`, the kubeconfig and env files, the ports of a control plane.
//!
//! # Addresses
//!
//! kube-apiserver binds `0.0.0.0:<port>` and advertises [`ADVERTISE_ADDRESS`] (on the link
//! [`ADVERTISE_LINK`], created by [`ControlPlaneConfig::up`] and deleted by
//! [`ControlPlaneConfig::down`]): host-side clients use `https://127.0.0.1:<port>`, pods of
//! the kit's kubelet node use the `kubernetes` Service (`10.96.0.1:443`), whose endpoint is
//! `<advertise address>:<port>`.
//!
//! kube-controller-manager allocates every Node a `/24` of [`CLUSTER_CIDR`] as its
//! `spec.podCIDR` (the range allocator, which never hands out [`SERVICE_CIDR`]).
//!
//! # State directory
//!
//! ```text
//! <state>/lock            flock serializing up/down across processes
//! <state>/state.json      version, server URL, ports, admin token, component pids
//! <state>/kubeconfig      admin kubeconfig (token auth, embedded CA) for kubectl/kube-rs
//! <state>/env             `export KUBECONFIG=...` and friends, for `eval`/`source`
//! <state>/tokens.csv      kube-apiserver --token-auth-file
//! <state>/pki/            ca.crt ca.key apiserver.crt apiserver.key sa.key sa.pub
//!                         apiserver-kubelet-client.crt apiserver-kubelet-client.key
//! <state>/etcd/           etcd data directory
//! <state>/certs/          --cert-dir of controller-manager and scheduler
//! <state>/logs/<c>.log    stdout+stderr of each component
//! <state>/pids/<c>.pid    pid of each component (also in state.json)
//! ```

mod build;
mod certs;
mod front;
mod handle;
mod launch;
mod link;
mod state;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};

pub use build::build_script;
pub(crate) use build::go_path;
pub use certs::APISERVER_SANS;
pub(crate) use certs::{Identity, issue, write_file};
pub use handle::ControlPlane;
use launch::readyz;
pub(crate) use link::ip;
pub use link::{ADVERTISE_ADDRESS, ADVERTISE_LINK};
use state::{State, wipe_except_lock};

use crate::daemon;
use crate::lock::FileLock;
use crate::paths;

/// The pinned Kubernetes release: the newest minor that both `k8s-openapi` 0.29
/// (feature `v1_37`) and the Go module proxy support.
pub const K8S_VERSION: &str = "1.37.1";

/// The service CIDR (`--service-cluster-ip-range`); the `kubernetes` service gets its
/// first address, `10.96.0.1`.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The pod CIDRs of all nodes (kube-controller-manager `--cluster-cidr`): its range
/// allocator (`node-ipam-controller`) gives every Node a `/24` of it as `spec.podCIDR`,
/// which the kit's kubelet node hands its pods out of ([`crate::kubelet_node`]).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// The components, in start order (also their binary, log and pid file names).
const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// Binaries in the cache's `bin/` directory.
pub(crate) const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// Binaries of the kubelet node ([`crate::kubelet_node`]) in the same `bin/` directory,
/// built by [`ControlPlaneConfig::ensure_node_built`].
pub(crate) const NODE_BINARIES: &[&str] = &["kubelet", "kube-proxy"];

/// Where and how to build and run a control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneConfig {
    /// Kubernetes release without the `v`, e.g. `"1.37.1"`.
    pub version: String,
    /// Build cache: `bin/` with the binaries and the `complete` stamp.
    /// Default `$VERGE_CACHE_DIR`, else `~/.cache/verge/control-plane/v<version>`.
    pub cache_dir: PathBuf,
    /// State directory (layout in the [module docs](self)).
    /// Default `$VERGE_STATE_DIR`, else `~/.cache/verge/run/control-plane`.
    pub state_dir: PathBuf,
    /// kube-controller-manager `--node-monitor-grace-period`: how long a Node may go
    /// without a heartbeat before it is marked `Ready=Unknown`. Default 10 s (upstream
    /// 50 s) so node-loss tests are quick.
    pub node_monitor_grace_period: Duration,
    /// kube-controller-manager `--node-monitor-period`: how often node health is
    /// checked. Default 2 s (upstream 5 s).
    pub node_monitor_period: Duration,
    /// How long [`ControlPlaneConfig::up`] waits for `/readyz` and the `default`
    /// service account. Default 120 s.
    pub ready_timeout: Duration,
    /// kube-apiserver `--advertise-address`, held by the link [`ADVERTISE_LINK`]: the
    /// endpoint of the `kubernetes` Service. Default [`ADVERTISE_ADDRESS`].
    pub advertise_address: Ipv4Addr,
    /// The directory of the `cloudhub` binary the streams front runs (e.g. a release
    /// build's). Default `None`: the workspace's, as [`crate::process::workspace_bin`]
    /// finds it.
    pub front_bin_dir: Option<PathBuf>,
    /// kube-controller-manager controllers to leave off (its `--controllers=*,-<name>`
    /// names, e.g. `node-lifecycle-controller`; `node-ipam-controller` leaves Nodes without
    /// a `spec.podCIDR`, which the kit's kubelet node needs). Default none: every default
    /// controller runs.
    pub disabled_controllers: Vec<String>,
    /// kube-controller-manager `--node-cidr-mask-size`: the prefix of each Node's
    /// `spec.podCIDR` in the cluster CIDR (a /16). Default 24 (256 Nodes of 254 pod
    /// addresses); the fleet bench takes the widest that fits its largest fleet (29 for
    /// 8,192 Nodes, 30 for 16,384).
    pub node_cidr_mask_size: u8,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

impl ControlPlaneConfig {
    /// The configuration for [`K8S_VERSION`] with directories from `$VERGE_CACHE_DIR`
    /// and `$VERGE_STATE_DIR` (unset or empty: the defaults documented on the fields).
    pub fn from_env() -> Self {
        let env_dir = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let version = K8S_VERSION.to_owned();
        Self {
            cache_dir: env_dir("VERGE_CACHE_DIR").unwrap_or_else(|| {
                paths::verge_home()
                    .join("control-plane")
                    .join(format!("v{version}"))
            }),
            state_dir: env_dir("VERGE_STATE_DIR")
                .unwrap_or_else(|| paths::run_dir().join("control-plane")),
            version,
            node_monitor_grace_period: Duration::from_secs(10),
            node_monitor_period: Duration::from_secs(2),
            ready_timeout: Duration::from_secs(120),
            advertise_address: ADVERTISE_ADDRESS,
            front_bin_dir: None,
            disabled_controllers: Vec::new(),
            node_cidr_mask_size: 24,
        }
    }

    /// `<cache-dir>/bin`.
    pub fn bin_dir(&self) -> PathBuf {
        self.cache_dir.join("bin")
    }

    /// `<cache-dir>/bin/kubectl`.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir().join("kubectl")
    }

    /// `<state-dir>/kubeconfig`.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }

    /// `<state-dir>/env`.
    pub fn env_path(&self) -> PathBuf {
        self.state_dir.join("env")
    }

    /// Starts the control plane, or returns the one already running from
    /// [`ControlPlaneConfig::state_dir`] if it is healthy (same version and advertise
    /// address, every component alive, `/readyz` ok). Builds first if needed
    /// ([`ControlPlaneConfig::ensure_built`]). Creates the link [`ADVERTISE_LINK`] with
    /// [`ControlPlaneConfig::advertise_address`] if missing (needs root).
    ///
    /// A control plane started by an older test kit (other flags, e.g. bound to
    /// `127.0.0.1` without an advertise address) is not healthy by this definition: it is
    /// stopped and started afresh, once.
    ///
    /// A fresh start wipes the state directory (stopping leftovers of an unhealthy
    /// control plane), generates PKI and the admin token, picks free loopback ports,
    /// starts etcd, then kube-apiserver, kube-controller-manager and kube-scheduler
    /// detached, and waits for `/readyz` and the `default` service account (typically a
    /// few seconds). Concurrent callers are serialized by `<state>/lock`.
    ///
    /// # Errors
    /// Build failure; the advertise link cannot be set up; a component exiting or not
    /// getting ready within
    /// [`ControlPlaneConfig::ready_timeout`] (the error holds its log tail; the
    /// processes are stopped and the state directory kept for inspection).
    pub async fn up(&self) -> anyhow::Result<ControlPlane> {
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.ensure_built()).await??;
        std::fs::create_dir_all(&self.state_dir)
            .with_context(|| format!("creating {}", self.state_dir.display()))?;
        let _lock = FileLock::acquire_async(&self.state_dir.join("lock")).await?;
        link::ensure(self.advertise_address)?;
        if let Some(running) = self.status().await? {
            front::ensure(&running, self.front_bin_dir.as_deref()).await?;
            return Ok(running);
        }
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.stop_and_wipe()).await??;
        let started = self.start().await?;
        front::ensure(&started, self.front_bin_dir.as_deref()).await?;
        Ok(started)
    }

    /// The running control plane of [`ControlPlaneConfig::state_dir`], if it is
    /// healthy: `state.json` names this version, bin dir, advertise address and the
    /// current layout of flags and certificates, every component process
    /// is alive and `/readyz` answers `ok` within 5 s. Takes no lock.
    ///
    /// # Errors
    /// Only when the kubeconfig exists but cannot be loaded into a client.
    pub async fn status(&self) -> anyhow::Result<Option<ControlPlane>> {
        let Some(state) = State::load(&self.state_dir) else {
            return Ok(None);
        };
        if state.version != self.version
            || state.bin_dir != self.bin_dir()
            || state.advertise_address != Some(self.advertise_address)
            || state.layout != state::LAYOUT
        {
            return Ok(None);
        }
        if !state
            .components
            .iter()
            .all(|c| daemon::is_alive(c.pid, Some(&c.name)))
        {
            return Ok(None);
        }
        let cp = ControlPlane::from_state(self, state);
        let client = cp.client().await?;
        match tokio::time::timeout(Duration::from_secs(5), readyz(&client)).await {
            Ok(Ok(())) => Ok(Some(cp)),
            _ => Ok(None),
        }
    }

    /// Stops the control plane of [`ControlPlaneConfig::state_dir`] (SIGTERM to each
    /// component's process group, SIGKILL after 10 s) and removes the state directory's
    /// contents (all but the lock file), then deletes the link [`ADVERTISE_LINK`] unless
    /// another running kube-apiserver advertises its address. Returns whether any component
    /// was running. Blocks; waits for a concurrent [`ControlPlaneConfig::up`] to finish
    /// first. A kubelet node attached to this control plane stops working; stop it first
    /// ([`crate::kubelet_node::KubeletNode::stop`]).
    ///
    /// # Errors
    /// A component survives SIGKILL, or the state cannot be removed.
    pub fn down(&self) -> anyhow::Result<bool> {
        if !self.state_dir.exists() {
            return Ok(false);
        }
        let _lock = FileLock::acquire(&self.state_dir.join("lock"))?;
        let was_running = self.stop_and_wipe()?;
        link::remove_if_unused(self.advertise_address)?;
        Ok(was_running)
    }

    /// Stops every recorded component and empties the state dir (lock held by caller).
    fn stop_and_wipe(&self) -> anyhow::Result<bool> {
        front::stop(&self.state_dir);
        let state = State::load(&self.state_dir);
        let pids: Vec<u32> = crate::run_state::recorded_pids(
            &self.state_dir,
            COMPONENTS,
            state.as_ref().map(|s| s.components.as_slice()),
        )
        .into_iter()
        .map(|(_, pid)| pid)
        .collect();
        let was_running = !pids.is_empty();
        let survivors = daemon::stop_all(&pids, Duration::from_secs(10));
        if !survivors.is_empty() {
            bail!("control-plane processes survived SIGKILL: {survivors:?}");
        }
        wipe_except_lock(&self.state_dir)?;
        Ok(was_running)
    }
}
