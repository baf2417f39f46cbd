//! Verge devicecontroller: the cloud controller of the `device` group (KubeEdge's
//! cloudcore devicecontroller), for KubeEdge's device API `devices.kubeedge.io/v1beta1`.
//!
//! It attaches to the `ControllerHub` of every cloudhub replica exactly as edgecontroller
//! does (the shared `verge-controller` client: TLS against the Verge CA, a service-account
//! token, every replica, routing by session), serving group `device` ([`IDENTITY`]).
//! Downstream it sends each connected edge node the Devices bound to it (`spec.nodeName`)
//! and the DeviceModels they reference, resyncing each node by its inventory when it
//! connects; a Device that is invalid or whose model is missing is not sent and gets a
//! Warning event instead. Upstream it writes what edges report (`update
//! <ns>/devicestatus/<name>`) into the DeviceStatus of the same name (docs/protocol.md).
//!
//! # Layout
//! - [`cache`]: watch caches (reflectors) of Devices, DeviceModels and edge Nodes.
//! - [`desired`]: what a node should hold and whether a Device may go to it; pure.
//! - [`downstream`]: the task that sends `update`/`delete`/`resync` messages to connected
//!   nodes and validates Devices.
//! - [`problems`]: Warning events of Devices that cannot go to their node.
//! - [`upstream`]: parsing and applying device status reports ([`upstream::status`]).
//! - [`error`]: the crate's [`Error`].
//!
//! The configuration ([`Config`]) is the shared controller configuration of
//! `verge-controller`.

pub mod cache;
pub mod desired;
pub mod downstream;
pub mod error;
pub mod problems;
pub mod upstream;

pub use error::{Error, Result};
pub use verge_controller::config::{self, Config};

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};
use verge_controller::Identity;
use verge_controller::leader::{Elected, Leadership};
use verge_controller::service::Attached;
use verge_core::{Group, Module};

use crate::cache::Caches;
use crate::upstream::Context;

/// devicecontroller on the ControllerHub: name `devicecontroller` (also its default service
/// account `verge-system/devicecontroller`), module `devicecontroller`, group `device`.
pub const IDENTITY: Identity = Identity {
    name: "devicecontroller",
    module: Module::DeviceController,
    group: Group::Device,
};

/// Where the probe endpoint listens unless `healthAddr` says otherwise: `0.0.0.0:10007`
/// (cloudhub uses 10005, edgecontroller 10006, so all three fit on one host).
pub const DEFAULT_HEALTH_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 10007));

/// Capacity of the queue of cache changes waiting for the downstream task.
const CACHE_EVENTS: usize = 256;

/// Capacity of the queue of Device problems waiting to be published as events.
const REPORTS: usize = 1024;

/// The devicecontroller service: one `ControllerHub` stream per cloudhub replica, the watch
/// caches, the downstream task and the per-node workers, run by the replica that leads
/// (leader election on a Lease).
pub struct DeviceController(Elected);

impl DeviceController {
    /// A controller that reads and writes the API server with `client`. It needs (what
    /// deploy/cloud/access/rbac.yaml grants `devicecontroller`): get/list/watch on `devices`
    /// and list/watch on `devicemodels` (`devices.kubeedge.io`; get checks a report for a
    /// Device the cache does not hold yet); create/patch on `devicestatuses` (server-side
    /// apply); create on `events.k8s.io` events; list/watch on nodes; get on the ConfigMap
    /// `verge-ca` in verge-system (the CA of cloudhub's certificate). With leader election:
    /// get/update on its Lease and create on `leases` in `leaderElection.leaseNamespace`;
    /// with `cloudhubService`: list/watch on `endpointslices` in the Service's namespace.
    /// Only when `cloudhubAuth.tokenFile` is unset (the manifests set it to the projected
    /// token) does it request its ControllerHub token, which needs create on its own
    /// `serviceaccounts/token`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self(Elected::new(config, client))
    }

    /// This replica's leadership (whether it leads, who holds the Lease), for health and
    /// metrics.
    pub fn leadership(&self) -> Leadership {
        self.0.leadership()
    }

    /// Runs until `shutdown` is cancelled. With leader election (the default) it first
    /// waits as a standby, doing nothing, until it holds the Lease (`leaderElection`); the
    /// leader then starts the watch caches, the downstream task and the event task,
    /// attaches to every cloudhub replica (each stream re-attached with backoff whenever it
    /// ends), sends Devices and DeviceModels down and writes status reports. On shutdown it
    /// stops taking messages, lets every worker finish the API call it is in, returns once
    /// all tasks ended (callers bound this with a grace period), and releases the Lease so a
    /// standby takes over at once.
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

/// What the leader runs until `shutdown`: see [`DeviceController::run`].
async fn lead_until(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<()> {
    let attached = Attached::start(config, IDENTITY, &client, shutdown)?;
    let (tracker, stop) = (&attached.tracker, &attached.workers_stop);
    let (events_tx, events_rx) = mpsc::channel(CACHE_EVENTS);
    let caches = Caches::start(&client, &events_tx, tracker, stop);
    drop(events_tx);
    let (reports_tx, reports_rx) = mpsc::channel(REPORTS);
    let instance = attached.config.name_for(&IDENTITY).to_owned();
    tracker.spawn(
        problems::run(client.clone(), instance, reports_rx, stop.clone())
            .instrument(info_span!("events")),
    );
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    tracker.spawn(
        downstream::run(caches.clone(), down_rx, events_rx, reports_tx, stop.clone())
            .instrument(info_span!("downstream")),
    );
    let context = Context { client, caches };
    attached.serve(context, down_tx).await;
    Ok(())
}
