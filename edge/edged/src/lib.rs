//! edged: pods on a container runtime, and the node they run on (KubeEdge: edged; the
//! kubelet's pod lifecycle, node status manager and node lease).
//!
//! The edge crates below it: the store (`verge-edge-store`), edgehub (`verge-edgehub`,
//! upstream reports), metamanager (`verge-metamanager`, committed objects as
//! [`StoreEvent`]s and cloud queries) and the container runtime
//! (`verge-container-runtime`, the [`ContainerRuntime`] trait and Docker). No other edge
//! crate imports this one but edgecore, which wires it.
//!
//! # Layout
//! - `pod_worker`: one task per pod running its explicit lifecycle (sandbox, volumes, init
//!   containers, app containers with restart policy and crash-loop back-off, liveness kills,
//!   graceful termination).
//! - [`spec`]: `v1.Container` -> the runtime's `ContainerSpec` (command/args, env, binds,
//!   resources, securityContext), and the sandbox (infra) container.
//! - [`pleg`]: the pod lifecycle event generator: relists containers by label and listens to
//!   the runtime's events.
//! - [`status`]: builds `v1.PodStatus` and reports it upstream when it changes.
//! - [`objects`], [`env`](mod@env), [`volumes`]: configmaps/secrets/tokens/service lists, env
//!   (with the kubelet's service variables) and volumes.
//! - [`admission`]: pods the node refuses (another OS, forbidden sysctls, no room beside the
//!   admitted pods: resources, host ports).
//! - [`etc_hosts`], [`sysctls`], [`run_as_non_root`], [`termination_message`]: the
//!   kubelet-managed `/etc/hosts`, pod sysctls, the `runAsNonRoot` check before a container
//!   is created, and termination messages.
//! - [`probe`], [`gc`]: probes; container and image garbage collection.
//! - [`events`]: the kubelet's pod events (Pulled, Created, Started, Killing, BackOff, ...).
//! - [`node`]: node registration, node status and node lease ([`NodeAgent`]).
//! - [`config`]: the `edged:` section ([`EdgedConfig`]) and what edged reads of the rest of
//!   the file ([`EdgedSettings`]).
//! - [`metrics`]: pod start latency by stage; [`quantity`]: Kubernetes resource quantities.
//! - [`resources`]: container CPU and memory as cgroup settings (creation and resize);
//!   [`resize`]: in-place pod resize.
//! - [`error`]: the crate's [`Error`].
//!
//! [`Edged::run`] lists every pod in the store at start-up and syncs it (containers found by
//! label are adopted, missing ones are created: offline restart recovery), then follows
//! metamanager's [`StoreEvent`]s (pods added, changed, deleted; configmap/secret changes
//! refresh the volumes of the pods using them), PLEG events and probe results.

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod admission;
pub mod config;
pub mod env;
pub mod error;
pub mod etc_hosts;
pub mod events;
pub mod gc;
pub mod hold;
pub mod metrics;
pub mod network;
pub mod node;
pub mod objects;
pub mod pleg;
mod pod_worker;
pub mod probe;
pub mod quantity;
pub mod resize;
pub mod resolv_conf;
pub mod resources;
pub mod run_as_non_root;
pub mod spec;
pub mod status;
pub mod sysctls;
pub mod termination_message;
pub mod volumes;

mod dispatch;

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use objects::StoreObjects;
use probe::DockerProber;
use probe::ProbeManager;
use verge_container_runtime::{ContainerRuntime, DockerRuntime};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::StoreEvent;

pub use config::{EdgedConfig, EdgedSettings};
pub use error::{Error, Result};
pub use node::NodeAgent;
use verge_runtime::ErrorChain;
use volumes::VolumeManager;

/// What [`Edged::runtime_version`] reports until Docker answered.
pub const UNKNOWN_RUNTIME: &str = "docker://unknown";

/// Everything a pod worker needs; shared by all of them. `R` is the container runtime
/// ([`DockerRuntime`] in production, a fake in unit tests).
pub(crate) struct Context<R: ContainerRuntime = DockerRuntime> {
    pub config: Arc<EdgedSettings>,
    pub runtime: R,
    pub objects: Arc<StoreObjects>,
    pub volumes: VolumeManager<StoreObjects>,
    pub probes: ProbeManager<DockerProber<R>>,
    pub status: status::StatusHandle,
    pub events: events::Recorder,
    pub store: MetaStore,
    /// The node's IP (hostIP; podIP of hostNetwork pods).
    pub node_ip: Option<IpAddr>,
    /// Where new pod sandboxes go ([`network`]).
    pub network: watch::Receiver<network::NetworkState>,
    /// The pod IPs on the pod network, each the pod's for its life
    /// ([`verge_edge_net::ipam`]); seeded from the containers' labels at start-up.
    pub pod_ips: std::sync::Mutex<verge_edge_net::PodIps>,
    /// The pods admitted and still holding their share of the node, at their allocated
    /// resources: what new pods are admitted against, and resizes allocated against
    /// ([`admission`], [`resize`]).
    pub admitted: admission::Admitted,
    /// The node's memory, bytes (`capacity.memory`): the OOM score adjustment of Burstable
    /// containers ([`resources::oom_score_adj`]).
    pub memory_capacity: i64,
}

/// The edged component; see the module docs.
#[derive(Debug)]
pub struct Edged {
    config: Arc<EdgedSettings>,
    store: MetaStore,
    hub: EdgeHubHandle,
    objects: Arc<StoreObjects>,
    events: broadcast::Receiver<StoreEvent>,
    version: watch::Sender<String>,
}

impl Edged {
    /// An edged for the pods in `store`, following `events` (from
    /// [`MetaManager::subscribe`](verge_metamanager::MetaManager::subscribe), taken before metamanager
    /// runs), reporting through `hub` and reading configmaps/secrets through `objects`.
    pub fn new(
        config: Arc<EdgedSettings>,
        store: MetaStore,
        hub: EdgeHubHandle,
        objects: StoreObjects,
        events: broadcast::Receiver<StoreEvent>,
    ) -> Self {
        Self {
            config,
            store,
            hub,
            objects: Arc::new(objects),
            events,
            version: watch::Sender::new(UNKNOWN_RUNTIME.to_owned()),
        }
    }

    /// `nodeInfo.containerRuntimeVersion`: `docker://<version>` once Docker answered,
    /// [`UNKNOWN_RUNTIME`] before.
    pub fn runtime_version(&self) -> watch::Receiver<String> {
        self.version.subscribe()
    }

    /// Connects to Docker (retrying every 5 s until it answers), then runs pods until
    /// `shutdown`. Containers keep running when edgecore stops (offline autonomy); the next
    /// start adopts them.
    ///
    /// # Errors
    /// None so far: Docker and store failures are logged and retried.
    #[tracing::instrument(name = "edged", skip_all, fields(node = %self.config.node_name))]
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let endpoint = self.config.edged.container_runtime_endpoint.as_deref();
        let node = &self.config.node_name;
        let connect = || DockerRuntime::connect(endpoint, node);
        let Some(runtime) =
            verge_container_runtime::connect_retrying("docker", shutdown.cancelled(), connect)
                .await
        else {
            return Ok(());
        };
        match runtime.version().await {
            Ok(v) => {
                info!(runtime = %v, "docker connected");
                self.version.send_replace(v);
            }
            Err(e) => warn!(error = %ErrorChain(&e), "docker version unknown"),
        }
        let node_ip = self
            .config
            .edged
            .node_ip
            .or_else(|| crate::node::host::first_ipv4().map(IpAddr::V4));
        let tracker = tokio_util::task::TaskTracker::new();
        let stop = shutdown.child_token();
        let (network_tx, network_rx) = watch::channel(network::NetworkState::Unknown);
        tracker.spawn(network::run(
            runtime.clone(),
            self.store.clone(),
            self.config.node_name.clone(),
            self.events.resubscribe(),
            network_tx,
            stop.clone(),
        ));
        let (status, status_task) = status::StatusManager::new(self.hub.clone());
        let probes = ProbeManager::new(runtime.clone());
        let node = admission::NodeResources::detect(&self.config).await;
        // The allocations of the pods that ran before: admission and restoration count each
        // pod at its allocation, not at its spec (kubelet: the allocation manager's
        // checkpoint).
        let pods_dir = self.config.pods_dir();
        let allocations =
            tokio::task::spawn_blocking(move || resize::Checkpoint::load_all(&pods_dir))
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %e, "resource checkpoints not read; pods admitted at their spec");
                    Default::default()
                });
        let pod_ips = network::seed_pod_ips(&runtime).await;
        let ctx = Arc::new(Context {
            pod_ips: std::sync::Mutex::new(pod_ips),
            volumes: VolumeManager::new(self.config.pods_dir(), Arc::clone(&self.objects)),
            config: Arc::clone(&self.config),
            runtime: runtime.clone(),
            objects: Arc::clone(&self.objects),
            probes: probes.clone(),
            status,
            events: events::Recorder::new(self.hub.clone(), &self.config.node_name),
            store: self.store.clone(),
            node_ip,
            network: network_rx,
            admitted: admission::Admitted::with_allocations(node.allocatable, allocations),
            memory_capacity: i64::try_from(node.memory_capacity).unwrap_or(i64::MAX),
        });
        tracker.spawn(status_task.run(stop.clone()));
        let (pleg_tx, pleg_rx) = tokio::sync::mpsc::channel(pleg::CHANNEL_CAPACITY);
        let pleg = pleg::Pleg::new(
            runtime.clone(),
            self.config.edged.pleg_relist_period,
            pleg_tx,
        );
        tracker.spawn(pleg.run(stop.clone()));
        let (live_tx, live_rx) = watch::channel(Default::default());
        let gc = gc::GarbageCollector::new(runtime.clone(), self.config.edged.gc.clone())
            .pin_images([self.config.edged.pod_sandbox_image.as_str()])
            .only_node();
        tracker.spawn(gc.run(live_rx, stop.clone()));
        let result = dispatch::Dispatcher::new(
            ctx,
            self.events,
            pleg_rx,
            (probes.subscribe(), probes.failures()),
            live_tx,
        )
        .run(stop.clone())
        .await;
        stop.cancel();
        probes.shutdown();
        tracker.close();
        tracker.wait().await;
        info!("edged stopped");
        result
    }
}
