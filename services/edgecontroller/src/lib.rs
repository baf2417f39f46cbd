//! Verge edgecontroller: the cloud controller of the `resource` group (KubeEdge's
//! edgecontroller).
//!
//! It attaches to the `ControllerHub` of every cloudhub replica, sends each connected edge
//! node its own Node object, the pods bound to it and the configmaps and secrets they
//! reference (resyncing each node by its
//! inventory when it connects), and applies what edges report to the API server: node
//! registration, status and lease, pod status, completed pod deletions, events, and queries
//! of configmaps, secrets, service lists and service account tokens (docs/protocol.md). It
//! renews the Lease of every connected node while its session lives ([`renewer`]). Pods that
//! ask for edge nodes are kept from eviction on a lost link by the API server itself (the
//! MutatingAdmissionPolicy `verge-edge-offline-tolerations`); with `patchOfflineTolerations`
//! it also patches the other pods on edge nodes ([`offline`], docs/offline.md).
//!
//! It attaches with the ControllerHub client shared with devicecontroller
//! (`verge-controller`: configuration, TLS and token, replicas, sessions, per-node workers),
//! serving group `resource` ([`IDENTITY`]).
//!
//! # Layout
//! - [`config`], [`replicas`], [`hub`], [`hub_auth`], [`leader`], [`dispatch`],
//!   [`sessions`], [`fingerprint`]: re-exported from `verge-controller`.
//! - [`cache`]: watch caches (reflectors) of edge nodes, bound pods, configmaps, secrets,
//!   services.
//! - [`desired`]: what a node should hold (pod references) and the resync diff; pure.
//! - [`downstream`]: the task that sends `update`/`delete`/`resync` messages to connected
//!   nodes.
//! - [`offline`]: the optional task that makes pods on edge nodes tolerate an unreachable
//!   node (`patchOfflineTolerations`).
//! - [`renewer`]: the task that renews the Lease of every connected node while its session
//!   lives (the edge sends its Lease once per session).
//! - [`upstream`]: parsing and applying edge reports ([`upstream::node`],
//!   [`upstream::lease`], [`upstream::pod`], [`upstream::event`], [`upstream::query`],
//!   [`upstream::services`], [`upstream::token`]).
//! - [`referenced`]: the ConfigMaps and Secrets edge pods use, each watched as a node using it.
//! - [`node_clients`]: the clients acting as each node (impersonation), so the API server
//!   bounds what edgecontroller does for a node.
//! - [`error`]: the crate's [`Error`].

pub mod cache;
pub mod desired;
pub mod downstream;
pub mod error;
pub mod node_clients;
pub mod offline;
pub mod referenced;
pub mod renewer;
pub mod site;
pub mod upstream;

pub use error::{Error, Result};
pub use verge_controller::config::{self, Config};
pub use verge_controller::{dispatch, fingerprint, hub, hub_auth, leader, replicas, sessions};

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use verge_controller::Identity;
use verge_controller::leader::{Elected, Leadership};
use verge_controller::service::Attached;
use verge_core::{Group, Module};

use crate::cache::Caches;
use crate::node_clients::NodeClients;
use crate::renewer::Renewer;
use crate::upstream::{Context, NodeLabelPolicy};

/// edgecontroller on the ControllerHub: name `edgecontroller` (also its default service
/// account `verge-system/edgecontroller`), module `edgecontroller`, group `resource`.
pub const IDENTITY: Identity = Identity {
    name: "edgecontroller",
    module: Module::EdgeController,
    group: Group::Resource,
};

/// Where the probe endpoint listens unless `healthAddr` says otherwise: `0.0.0.0:10006`
/// (cloudhub uses 10005, devicecontroller 10007, so all three fit on one host).
pub const DEFAULT_HEALTH_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 10006));

/// Capacity of the queue of cache changes waiting for the downstream task.
const CACHE_EVENTS: usize = 256;

/// The edgecontroller service: one `ControllerHub` stream per cloudhub replica and the
/// per-node workers, run by the replica that leads (leader election on a Lease).
pub struct EdgeController(Elected);

impl EdgeController {
    /// A controller that reads and writes the API server with `client`. In its own name it
    /// needs list/watch on nodes, pods and services; with `patchOfflineTolerations` patch on
    /// pods ([`offline`]); with leader election get/create/update on its `leases` in
    /// `leaderElection.leaseNamespace`; with `cloudhubService` list/watch on
    /// `endpointslices` in the Service's namespace. Everything it does for a node it does
    /// as that node ([`node_clients`]), which needs the constrained impersonation verbs of
    /// `deploy/cloud/access/rbac.yaml`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self(Elected::new(config, client))
    }

    /// This replica's leadership (whether it leads, who holds the Lease), for health and
    /// metrics.
    pub fn leadership(&self) -> Leadership {
        self.0.leadership()
    }

    /// Runs until `shutdown` is cancelled. With leader election (the default) it first
    /// waits as a standby, doing nothing, until it holds the Lease
    /// (`leaderElection`, [`leader`]); the leader then starts the watch caches, the
    /// downstream task, the toleration task ([`offline`], with `patchOfflineTolerations`)
    /// and the Lease renewer ([`renewer`]), attaches to every cloudhub replica ([`replicas`]; each stream re-attached with backoff whenever it ends), sends
    /// objects down and applies upstream messages. On shutdown it stops taking messages,
    /// lets every worker finish the API call it is in, returns once all tasks ended (callers
    /// bound this with a grace period), and releases the Lease so a standby takes over at
    /// once.
    ///
    /// # Errors
    /// [`Error::Hub`] when a configured cloudhub address, `cloudhub_service` or
    /// `leaderElection` is invalid, or when the Lease was lost while leading (the
    /// controller stopped acting; the process should exit). Everything else (connection
    /// loss, API failures) is logged and retried or answered to the edge.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        self.0.run(&IDENTITY, shutdown, lead_until).await
    }
}

/// What the leader runs until `shutdown`: see [`EdgeController::run`].
async fn lead_until(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<()> {
    let node_labels = NodeLabelPolicy::new(config.reserved_node_labels.clone());
    let patch_tolerations = config.patch_offline_tolerations;
    let attached = Attached::start(config, IDENTITY, &client, shutdown)?;
    let (tracker, stop) = (&attached.tracker, &attached.workers_stop);
    let (events_tx, events_rx) = mpsc::channel(CACHE_EVENTS);
    let node_clients = NodeClients::new(client.clone());
    let caches = Caches::start(&client, &node_clients, &events_tx, tracker, stop);
    drop(events_tx);
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    tracker.spawn(
        downstream::run(caches.clone(), down_rx, events_rx, stop.clone())
            .instrument(info_span!("downstream")),
    );
    if patch_tolerations {
        tracker.spawn(
            offline::run(client.clone(), caches.clone(), stop.clone())
                .instrument(info_span!("tolerations")),
        );
    }
    // Per leadership term: a new leader adopts the connected nodes' Leases (renewer).
    let renewer = Renewer::new();
    tracker.spawn(
        renewer::run(renewer.clone(), node_clients.clone(), stop.clone())
            .instrument(info_span!("lease_renewer")),
    );
    let context = Context {
        nodes: node_clients,
        caches,
        renewer,
        node_labels,
    };
    attached.serve(context, down_tx).await;
    Ok(())
}
