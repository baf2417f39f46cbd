//! Verge test kit (dev-only): the real components tests run against.
//!
//! architecture.md §6: tests never replace Kubernetes or Docker with
//! hand-written fakes. This crate provides them, reproducibly, on a fresh Debian
//! machine:
//!
//! * a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler) of one pinned release ([`control_plane::K8S_VERSION`]), built from
//!   the Kubernetes Go modules into a cache outside the repository and started as
//!   detached background processes that outlive the calling test binary;
//! * a kubelet node for it ([`KubeletNode`]): kubelet and kube-proxy of the same release,
//!   containerd built from its Go module, runc and CNI plugins from Debian;
//! * the Docker engine (Debian's `docker.io`) and the local test image
//!   [`docker::TEST_IMAGE`];
//! * a private MQTT broker, Debian's mosquitto, with a password ([`mosquitto::Mosquitto`]);
//! * Jaeger's v1 all-in-one of one pinned release ([`jaeger::JAEGER_VERSION`]), built from
//!   its Go module and started detached on loopback like the control plane (OTLP receivers,
//!   in-memory storage), with a typed client of its trace query API ([`jaeger::shared`]);
//! * metrics-server of one pinned release ([`metrics_server::VERSION`]), built from its Go
//!   module and deployed on the kubelet node from the release's manifests
//!   ([`metrics_server::deploy`]), scraping edge nodes through cloudhub;
//! * an OCI registry, the CNCF distribution registry of one pinned release
//!   ([`registry::REGISTRY_VERSION`]) built from its Go module, one private instance per
//!   handle, HTTPS and password only, trusted by Docker ([`registry::Registry`]);
//! * the Go DMI mapper built from Verge's `.proto` ([`go_mapper::ensure_built`]);
//! * the Debian packages the build and the tests need ([`packages::ensure_packages`]);
//! * a guard for processes a test spawns ([`process::ChildProcess`]) and the lookup of
//!   the workspace's built binaries ([`process::workspace_bin`]).
//!
//! # Layout
//!
//! * [`control_plane`] — [`ControlPlaneConfig`] (versions, directories, timings),
//!   [`ControlPlaneConfig::ensure_built`], [`ControlPlaneConfig::up`] /
//!   [`ControlPlaneConfig::down`] and the [`ControlPlane`] handle.
//! * [`crds`] — [`crds::install_device_crds`] and [`crds::install_fleet_crds`] (the CRDs of `deploy/crds/`),
//!   [`crds::install_cloud_rbac`] (`deploy/cloud/access/`).
//! * [`jaeger`] — [`jaeger::JaegerConfig`] (build, `up` / `status` / `down`), [`jaeger::shared`]
//!   and the [`jaeger::Jaeger`] handle: `traces`, `trace`, `find_traces` into typed
//!   [`jaeger::Trace`]s and [`jaeger::Span`]s.
//! * [`kubelet_node`] — [`KubeletNode`]: a real kubelet node (kubelet, kube-proxy, containerd)
//!   attached to the control plane, so the cloud services run as pods.
//! * [`metrics_server`] — [`metrics_server::MetricsServerConfig`] (binary, image),
//!   [`metrics_server::deploy`].
//! * [`deployment`] — [`deployment::Deployment`]: the images on a kubelet node and
//!   `kubectl apply -k deploy/cloud`, with what tests and benchmarks read back.
//! * [`docker`] — [`docker::ensure_docker`], [`docker::ensure_test_image`].
//! * [`edge_install`] — [`edge_install::EdgeInstall`]: an edgecore configured, joined and
//!   started as docs/install.md says (`deploy/edge`).
//! * [`mosquitto`] — [`mosquitto::Mosquitto`]: a broker on a free loopback port, stopped on drop.
//! * [`dmi`] — [`dmi::FakeEdgecore`] (edgecore's DMI server for mapper tests), a mapper
//!   client, sample DMI devices and models.
//! * [`go_mapper`] — [`go_mapper::ensure_built`]: the Go mapper generated from the DMI proto.
//! * [`kubeedge_source`] — [`kubeedge_source::source_dir`]: KubeEdge's release source (its CRDs
//!   and samples) from the Go module proxy, for compatibility tests.
//! * [`mounts`] — mount points under a directory and unmounting them (what a killed
//!   kubelet or edgecore leaves).
//! * [`netns`] — [`netns::EdgeNetns`]: an edge host behind a veth link that tests cut; [`netns::SiteNet`], the segment
//!   joining the edge hosts of one site.
//! * [`netns_docker`] — [`netns_docker::NetnsDocker`]: a Docker engine of its own inside such
//!   a namespace (separate pods, pod network and iptables per edge host).
//! * [`packages`] — [`packages::ensure_packages`] (apt-get).
//! * [`registry`] — [`registry::RegistryConfig`] (build), [`registry::Registry`]: a registry
//!   on loopback or a given address (`start`, `start_on`), its credentials, pull-secret JSON
//!   and `push`.
//! * [`process`] — [`process::ChildProcess`], [`process::workspace_bin`].
//! * [`paths`] — the default cache and run directories.
//! * [`wait`] — [`wait::wait_for`] (poll with a deadline), [`wait::wait_for_port`],
//!   [`wait::create_namespace`], [`wait::ready_status`].
//!
//! # Use from a test binary
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! let cp = verge_testkit::shared().await?;
//! let client = cp.client().await?;
//! # Ok(()) }
//! ```
//!
//! [`shared`] leaves the control plane running so the next test binary reuses it
//! (start-up costs several seconds; reuse costs milliseconds). Stop it with
//! `cargo xtask control-plane down`; `cargo xtask test` starts it before and stops it
//! after the whole test run.
//!
//! # Environment
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `VERGE_CACHE_DIR` | directory holding the built control plane (`bin/`, `complete`) | `~/.cache/verge/control-plane/v<version>` |
//! | `VERGE_STATE_DIR` | control-plane state directory (certs, data, logs, kubeconfig) | `~/.cache/verge/run/control-plane` |
//! | `VERGE_BIN_DIR` | directory holding the workspace's built binaries | derived from the test executable's path |
//! | `VERGE_NODE_DIR` | kubelet node run directory ([`kubelet_node`]) | `~/.cache/verge/run/kubelet-node` |
//! | `VERGE_JAEGER_CACHE_DIR` | directory holding the built Jaeger ([`jaeger`]) | `~/.cache/verge/jaeger/v<version>` |
//! | `VERGE_JAEGER_STATE_DIR` | Jaeger's state and log directory | `~/.cache/verge/run/jaeger` |
//! | `VERGE_REGISTRY_CACHE_DIR` | directory holding the built registry ([`registry`]) | `~/.cache/verge/registry/v<version>` |
//! | `VERGE_PROTO_TOOLS_CACHE` | directory holding buf and protoc-gen-doc ([`proto_tools`]) | `~/.cache/verge/proto-tools` |
//!
//! The control plane's env file (`<state>/env`, printed by
//! `cargo xtask control-plane env`) exports `KUBECONFIG`, `VERGE_STATE_DIR`,
//! `VERGE_KUBE_SERVER` (API server URL), `VERGE_KUBE_TOKEN` (admin bearer token) and
//! `VERGE_KUBE_BIN_DIR` (etcd, kube-*, kubectl).
//!
//! Errors are [`anyhow::Error`]s carrying the failing command, path, or the tail of
//! the failing component's log: this crate only serves tests and xtask.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

pub mod control_plane;
pub mod crds;
pub mod cuttable;
pub mod daemon;
pub mod debian;
pub mod deployment;
pub mod dmi;
pub mod docker;
pub mod edge_app;
pub mod edge_install;
pub mod example_clients;
pub mod go_build;
pub mod go_mapper;
pub mod jaeger;
pub mod kubeedge_source;
pub mod kubelet_node;
mod lock;
pub mod metrics_server;
pub mod mosquitto;
pub mod mounts;
pub mod netns;
pub mod netns_docker;
pub mod packages;
pub mod paths;
pub mod ports;
pub mod process;
pub mod proto_tools;
pub mod python_kube;
pub mod registry;
mod run_state;
pub mod trust;
pub mod wait;

pub use control_plane::{ControlPlane, ControlPlaneConfig};
pub use crds::{install_cloud_rbac, install_device_crds, install_fleet_crds};
pub use kubelet_node::{KubeletNode, KubeletNodeConfig};

/// The control plane shared by all test binaries of one run.
///
/// Ensures the Docker engine runs and [`docker::TEST_IMAGE`] exists, builds the
/// control plane if its cache is missing (about 10 minutes on a cold machine, once),
/// then [`ControlPlaneConfig::up`] with [`ControlPlaneConfig::from_env`]: an already
/// running, healthy control plane in `$VERGE_STATE_DIR` is reused, otherwise one is
/// started (a few seconds). Concurrent callers, in one or several processes, are
/// serialized by file locks, so exactly one control plane is started.
///
/// The control plane is deliberately left running when the test binary exits, for the
/// next test binary; `cargo xtask control-plane down` (or the end of
/// `cargo xtask test`) stops it.
///
/// # Errors
/// Failing package installation, Docker start-up, build, or a control plane that is
/// not ready within [`ControlPlaneConfig::ready_timeout`] (the error holds the tail of
/// the failing component's log).
pub async fn shared() -> anyhow::Result<ControlPlane> {
    tokio::task::spawn_blocking(|| -> anyhow::Result<()> {
        docker::ensure_docker()?;
        docker::ensure_test_image()
    })
    .await??;
    let config = ControlPlaneConfig::from_env();
    let build_config = config.clone();
    tokio::task::spawn_blocking(move || build_config.ensure_built()).await??;
    config.up().await
}
