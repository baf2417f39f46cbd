//! Verge edgecontroller: the cloud controller of the `resource` group (KubeEdge's
//! edgecontroller).
//!
//! It attaches to cloudhub's `ControllerHub` and applies what edges report to the API server:
//! node registration, node status and node leases (upstream). Later: pods, configmaps and
//! secrets sent down to the nodes, and resync by inventory (downstream).
//!
//! # Layout
//! - [`config`]: the YAML [`Config`].
//! - [`hub`]: the `ControllerHub.Attach` client stream, re-attached with backoff.
//! - [`dispatch`]: routes hub frames: session events to [`sessions`], upstream messages to one
//!   ordered worker per node.
//! - [`sessions`]: the connected nodes and their inventories.
//! - [`upstream`]: parsing and applying edge reports ([`upstream::node`],
//!   [`upstream::lease`]).
//! - [`error`]: the crate's [`Error`].

pub mod config;
pub mod dispatch;
pub mod error;
pub mod hub;
pub mod sessions;
pub mod upstream;

pub use config::Config;
pub use error::{Error, Result};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::dispatch::Dispatcher;

/// The edgecontroller service: one `ControllerHub` stream and its per-node workers.
pub struct EdgeController {
    config: Config,
    client: kube::Client,
}

impl EdgeController {
    /// A controller that writes to the API server with `client` (it needs get/create/patch on
    /// `nodes`, `nodes/status` and `coordination.k8s.io` `leases` in `kube-node-lease`).
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self { config, client }
    }

    /// Runs until `shutdown` is cancelled: attaches to cloudhub (re-attaching with backoff
    /// whenever the stream ends) and applies upstream messages. On shutdown it stops taking
    /// messages, lets every worker finish the API call it is in, and returns once all tasks
    /// ended (callers bound this with a grace period).
    ///
    /// # Errors
    /// [`Error::Endpoint`] when the configured cloudhub address is invalid. Everything else
    /// (connection loss, API failures) is logged and retried or answered to the edge.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let tracker = TaskTracker::new();
        // Workers stop with the caller's token, or when `run` itself fails.
        let workers_stop = shutdown.child_token();
        let (outbound_tx, mut outbound_rx) = mpsc::channel(self.config.outbound_queue.max(1));
        let mut dispatcher = Dispatcher::new(
            self.client,
            outbound_tx,
            self.config.node_queue,
            tracker.clone(),
            workers_stop.clone(),
        );
        let result = hub::run(&self.config, &mut outbound_rx, &mut dispatcher, &shutdown).await;
        workers_stop.cancel();
        drop(dispatcher);
        tracker.close();
        tracker.wait().await;
        result
    }
}
