//! The frame of a controller's `run`: attach to the cloudhub replicas ([`Attached::start`]),
//! let the controller start its own tasks (caches, downstream, ...) on the shared tracker,
//! then dispatch hub events until shutdown and drain every task ([`Attached::serve`]).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info_span};

use crate::dispatch::{Dispatcher, Handler, Input};
use crate::hub::HubEvent;
use crate::hub_auth::HubAuth;
use crate::replicas::Replicas;
use crate::{Config, Identity, Result};

/// Capacity of the queue of hub events (frames of every replica) waiting for the dispatcher.
const HUB_EVENTS: usize = 256;

/// A controller whose attach tasks started; its own tasks go on [`Attached::tracker`] and
/// stop at [`Attached::workers_stop`].
pub struct Attached {
    /// The controller's configuration.
    pub config: Arc<Config>,
    /// Where every task of the controller runs; drained by [`Attached::serve`].
    pub tracker: TaskTracker,
    /// Stops the controller's workers: cancelled with the caller's token, or when
    /// [`Attached::serve`] ends.
    pub workers_stop: CancellationToken,
    identity: Identity,
    shutdown: CancellationToken,
    replicas: Replicas,
    hub_events: mpsc::Receiver<HubEvent>,
}

impl Attached {
    /// Starts attaching to every configured cloudhub replica as `identity`, authenticated
    /// with a token for its service account (read through `client`); stops at `shutdown`.
    ///
    /// # Errors
    /// [`crate::Error::Endpoint`] or [`crate::Error::Discovery`] when a configured cloudhub
    /// address or `cloudhub_service` is invalid.
    pub fn start(
        config: Config,
        identity: Identity,
        client: &kube::Client,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        let tracker = TaskTracker::new();
        let config = Arc::new(config);
        let (hub_tx, hub_events) = mpsc::channel(HUB_EVENTS);
        let auth = HubAuth::new(&config.cloudhub_auth, &identity, client.clone());
        let replicas = Replicas::start(
            config.clone(),
            identity.clone(),
            auth,
            client.clone(),
            hub_tx,
            tracker.clone(),
            shutdown.clone(),
        )?;
        // Workers stop with the caller's token, or when `serve` ends.
        let workers_stop = shutdown.child_token();
        Ok(Self {
            config,
            tracker,
            workers_stop,
            identity,
            shutdown,
            replicas,
            hub_events,
        })
    }

    /// Dispatches hub events until shutdown (upstream messages to per-node workers running
    /// `handler`, sessions and answers to `downstream`), then stops the workers and returns
    /// once every task on the tracker ended.
    pub async fn serve<H: Handler>(self, handler: H, downstream: mpsc::UnboundedSender<Input>) {
        let Self {
            config,
            tracker,
            workers_stop,
            identity,
            shutdown,
            replicas,
            mut hub_events,
        } = self;
        let mut dispatcher = Dispatcher::new(
            handler,
            identity,
            downstream,
            crate::dispatch::QueueLimits::of(&config),
            tracker.clone(),
            workers_stop.clone(),
        );
        tracker.spawn(replicas.run().instrument(info_span!("replicas")));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                event = hub_events.recv() => match event {
                    Some(event) => dispatcher.on_event(event),
                    None => break,
                },
            }
        }
        workers_stop.cancel();
        drop(hub_events);
        drop(dispatcher);
        tracker.close();
        tracker.wait().await;
    }
}
