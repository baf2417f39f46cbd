//! Verge fleetcontroller: KubeEdge's fleet API for edge nodes, `apps.kubeedge.io/v1alpha1`
//! NodeGroup and EdgeApplication (the controllers of KubeEdge's controller-manager).
//!
//! - [`nodegroup`]: groups of nodes, by name or label; members are labelled
//!   `apps.kubeedge.io/belonging-to=<group>`.
//! - [`edgeapp`]: one workload placed on several groups, each copy with its group's
//!   overriders (replicas, image, env, command, args, resources), with per-object status;
//!   its Services carry KubeEdge's same-group topology annotation.
//! - [`operations`]: KubeEdge's `operations.kubeedge.io` jobs (node upgrade, image pre-pull,
//!   config update), checked field by field and given their nodes; not yet sent to them.
//!
//! The CRDs are `deploy/crds/apps.kubeedge.io_*.yaml`. Replicas elect a leader on a Lease
//! exactly as the other controllers (`verge-controller`); only the leader acts. It does not
//! attach to cloudhub: everything it does goes through the API server.

pub mod api;
pub mod edgeapp;
pub mod error;
pub mod nodegroup;
pub mod operations;

pub use error::{Error, Result};
pub use verge_controller::config::{self, Config};

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info_span};
use verge_controller::Identity;
use verge_controller::leader::{Elected, Leadership};
use verge_core::{Group, Module};

/// fleetcontroller's identity: name `fleetcontroller` (its Lease and its service account
/// `verge-system/fleetcontroller`). It serves no message group on cloudhub.
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
    _config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<()> {
    let groups =
        nodegroup::run(client.clone(), shutdown.clone()).instrument(info_span!("nodegroup"));
    let apps =
        edgeapp::run(client.clone(), shutdown.clone()).instrument(info_span!("edgeapplication"));
    let jobs = operations::run(client, shutdown).instrument(info_span!("operations"));
    tokio::join!(groups, apps, jobs);
    Ok(())
}
