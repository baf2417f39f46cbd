//! Verge fleetcontroller: KubeEdge's fleet API for edge nodes, `apps.kubeedge.io/v1alpha1`
//! NodeGroup and EdgeApplication (the controllers of KubeEdge's controller-manager).
//!
//! - [`nodegroup`]: groups of nodes, by name or label; members are labelled
//!   `apps.kubeedge.io/belonging-to=<group>`.
//! - [`edgeapp`]: one workload placed on several groups, each copy with its group's
//!   overriders (replicas, image, env, command, args, resources), with per-object status;
//!   its Services carry KubeEdge's same-group topology annotation.
//! - [`operations`]: KubeEdge's `operations.kubeedge.io` jobs (node upgrade, image pre-pull,
//!   config update), checked field by field, given their nodes, sent to them as tasks and
//!   followed by the nodes' reports.
//!
//! The CRDs are `deploy/crds/{apps,operations}.kubeedge.io_*.yaml`. Replicas elect a leader
//! on a Lease exactly as the other controllers (`verge-controller`); only the leader acts, and
//! it attaches to every cloudhub replica for group `fleet` (the jobs' tasks go to the nodes
//! and their reports come back that way).

pub mod api;
pub mod edgeapp;
pub mod error;
pub mod nodegroup;
pub mod operations;

pub use error::{Error, Result};
pub use verge_controller::config::{self, Config};

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info_span};
use verge_controller::Identity;
use verge_controller::leader::{Elected, Leadership};
use verge_controller::service::Attached;
use verge_core::{Group, Module};

/// fleetcontroller's identity: name `fleetcontroller` (its Lease and its service account
/// `verge-system/fleetcontroller`); it serves message group `fleet` on cloudhub (the jobs'
/// tasks and the nodes' reports on them).
pub const IDENTITY: Identity = Identity {
    name: "fleetcontroller",
    module: Module::FleetController,
    group: Group::Fleet,
};

/// Where the probe endpoint listens unless `healthAddr` says otherwise: `0.0.0.0:10008`
/// (after cloudhub's 10005, edgecontroller's 10006 and devicecontroller's 10007).
pub const DEFAULT_HEALTH_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 10008));

/// The fleetcontroller service: the NodeGroup and EdgeApplication controllers, run by the
/// replica that leads.
pub struct FleetController(Elected);

impl FleetController {
    /// A controller that reads and writes the API server with `client`; what it needs is
    /// listed on [`nodegroup::run`] and [`edgeapp::run`], plus get/update on its Lease and
    /// create on `leases` in `leaderElection.leaseNamespace`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self(Elected::new(config, client))
    }

    /// This replica's leadership, for health and metrics.
    pub fn leadership(&self) -> Leadership {
        self.0.leadership()
    }

    /// Runs until `shutdown`: a standby until it holds the Lease, then both controllers.
    ///
    /// # Errors
    /// [`Error::Hub`] for an invalid `leaderElection` or a Lease lost while leading (the
    /// process should exit). API failures are logged and retried.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        self.0.run(&IDENTITY, shutdown, lead_until).await
    }
}

/// What the leader runs until `shutdown`.
async fn lead_until(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<()> {
    let attached = Attached::start(config, IDENTITY, &client, shutdown)?;
    let (tracker, stop) = (&attached.tracker, &attached.workers_stop);
    tracker.spawn(nodegroup::run(client.clone(), stop.clone()).instrument(info_span!("nodegroup")));
    tracker.spawn(
        edgeapp::run(client.clone(), stop.clone()).instrument(info_span!("edgeapplication")),
    );
    let (events_tx, events_rx) = mpsc::channel(JOB_EVENTS);
    let caches = operations::cache::JobCaches::start(&client, &events_tx, tracker, stop);
    let credentials = operations::credentials::Credentials::default();
    tracker.spawn(
        operations::run(
            client.clone(),
            caches.clone(),
            credentials.clone(),
            events_tx,
            stop.clone(),
        )
        .instrument(info_span!("operations")),
    );
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    tracker.spawn(
        operations::downstream::run(caches, credentials, down_rx, events_rx, stop.clone())
            .instrument(info_span!("downstream")),
    );
    attached
        .serve(operations::upstream::Context { client }, down_tx)
        .await;
    Ok(())
}

/// The queue of job cache changes to the downstream task.
const JOB_EVENTS: usize = 256;
