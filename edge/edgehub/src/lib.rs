//! edgehub: the client end of cloudhub's `EdgeHub.Connect` stream (KubeEdge: edgehub).
//!
//! [`EdgeHub::run`] keeps one session open at a time: connect, send `EdgeHello` (node name,
//! token, the metamanager's inventory, version), wait for `Welcome`, then pump messages both
//! ways and send a `keepalive` every `Welcome.keepalive_interval_ms`. The session ends when
//! the stream fails or closes, or after three keepalive intervals without any frame from
//! cloudhub; edgehub then reconnects after a jittered exponential [`Backoff`] (reset after
//! every session that got its `Welcome`). With `cloudhub_alternates`, each attempt after a
//! failed connect or an ended session goes to the next address of
//! `[cloudhub] + cloudhub_alternates`, round-robin (the backoff applies before every attempt).
//!
//! Other modules send upstream through an [`EdgeHubHandle`] and learn about sessions from
//! [`EdgeHubHandle::sessions`]. Two kinds of upstream traffic (architecture.md §3.3):
//! * **Reports** ([`EdgeHubHandle::report`]: pod and node status, node registration,
//!   completed pod deletions, events) are committed to the redb outbox under an
//!   [`OutboxKey`](verge_edge_store::OutboxKey) first (a newer report of a key replaces the older one) and leave it only
//!   when the cloud `ack`s that very message id, i.e. after the API server accepted the
//!   write. While a session is up, edgehub sends them in FIFO order, at most
//!   `outbox.max_inflight` unanswered; an `error` answer is retried after a backoff and
//!   dropped after `outbox.max_attempts` refusals by a controller; an unanswered one is
//!   resent after `outbox.ack_timeout`; every reconnect (and edgecore restart) sends all
//!   that is still stored. The answers to reports are consumed here, not by metamanager.
//! * **Transient frames** ([`EdgeHubHandle::send`]: acks, queries, lease renewals) go
//!   through a bounded in-memory queue that outlives sessions; a message taken from it is
//!   lost if the session breaks before it is written (acks and queries are retried by their
//!   senders; a lease is renewed again).
//!
//! Downstream messages go to metamanager through a bounded channel. Every channel carries
//! the typed [`Envelope`]; the session (`session.rs`) is the only place that reads or writes
//! the wire `Message`.
//!
//! # Layout
//! - `lib.rs`: [`EdgeHub`] (the session loop) and [`EdgeHubHandle`].
//! - `session`: one session: connect, hello with inventory, pump, keepalives.
//! - [`outbox`]: durable reports ([`OutboxConfig`], the writer, [`outbox::message`]).
//! - `drain`: sending the outbox during a session.
//! - [`certificates`]: the node's key and client certificate: join with a bootstrap token,
//!   load for every connection, renew at 80 % of the lifetime (KubeEdge: edgehub's
//!   certificate manager).
//! - [`tunnel`]: cloudhub's tunnel requests, for the streaming server.
//! - [`metrics`]: the session and message series.
//! - [`config`]: the `edgeHub:` section ([`EdgeHubConfig`]) and [`HubSettings`].
//! - [`error`]: the crate's [`Error`].
//!
//! The crate sits on the edge store (`verge-edge-store`, the outbox and the inventory),
//! `verge-proto` and `verge-pki`; metamanager, edged, devicetwin and the apps bridge report
//! through it.

pub mod certificates;
pub mod config;
mod drain;
pub mod error;
pub mod metrics;
pub mod outbox;
mod session;
pub mod tunnel;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::{Instrument, info, info_span, warn};
use verge_core::Envelope;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_runtime::ErrorChain;

use error::Error as HubError;
pub use outbox::OutboxConfig;
pub use session::refusal;
use verge_runtime::backoff::Backoff;

pub use config::{EdgeHubConfig, HubSettings};
pub use error::{Error, Result};
use outbox::Outbox;
pub use tunnel::{TunnelRequest, TunnelRequests};
use verge_edge_store::MetaStore;

/// Keepalive interval used when `Welcome.keepalive_interval_ms` is 0.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);

/// An established session, as published to other modules. Two are equal when their
/// session id and generation are.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// cloudhub's `Welcome.session_id`.
    pub session_id: String,
    /// Counts sessions of this edgecore, from 1; changes on every reconnect.
    pub generation: u64,
    /// The keepalive interval cloudhub asked for.
    pub keepalive: Duration,
    /// The session's client, on the session's own connection: `EdgeHub.Dial` (Service
    /// connections across the link) goes through it.
    pub client: EdgeHubClient<Channel>,
}

impl PartialEq for SessionInfo {
    fn eq(&self, other: &Self) -> bool {
        self.session_id == other.session_id && self.generation == other.generation
    }
}

impl Eq for SessionInfo {}

/// Sends messages upstream; cheap to clone. Messages queue (reports: in the outbox) while no
/// session is open.
#[derive(Debug, Clone)]
pub struct EdgeHubHandle {
    tx: mpsc::Sender<Envelope>,
    /// `None` for a [`detached`](EdgeHubHandle::detached) handle.
    outbox: Option<Outbox>,
    sessions: watch::Receiver<Option<SessionInfo>>,
    _detached: Option<Arc<watch::Sender<Option<SessionInfo>>>>,
}

impl EdgeHubHandle {
    /// Reports `msg` durably: commits it to the outbox under its key
    /// ([`OutboxKey::of`](verge_edge_store::OutboxKey::of)), replacing the report of the same key that
    /// waits there, before returning. It is sent while a session is up and removed when the
    /// cloud acks it (see the module docs). A detached handle has no outbox: `msg` goes to
    /// its receiver like [`send`](Self::send).
    ///
    /// # Errors
    /// [`NotAReport`](verge_edge_store::Error::NotAReport) when `msg` has no outbox key; [`OutboxFull`](verge_edge_store::Error::OutboxFull) for a new
    /// event key while `outbox.max_entries` entries wait (the event is dropped; log it);
    /// [`Store`](verge_edge_store::Error::Store) if the commit fails; [`HubStopped`](crate::error::Error::HubStopped) for a detached handle
    /// whose receiver is gone.
    pub async fn report(&self, msg: Envelope) -> Result<()> {
        match &self.outbox {
            Some(outbox) => outbox.put(msg).await,
            None => self.send(msg).await,
        }
    }

    /// Runs `write` in one transaction of `store` (the store this handle's edgehub was built
    /// with) and commits the reports it returns to the outbox in the *same* transaction, so
    /// state and the reports of it are durable together or not at all (devicetwin: twin
    /// values and their `devicestatus` reports). Then wakes the drain, as
    /// [`report`](Self::report) does. `write` runs on the blocking pool. A detached handle
    /// commits `write`'s changes and hands the reports to its receiver.
    ///
    /// # Errors
    /// What `write` returns (nothing is committed then); as [`report`](Self::report)
    /// otherwise.
    pub async fn report_with<T, E, F>(&self, store: &MetaStore, write: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<verge_edge_store::Error> + From<Error> + Send + 'static,
        F: FnOnce(&verge_edge_store::Transaction<'_>) -> Result<(T, Vec<Envelope>), E>
            + Send
            + 'static,
    {
        match &self.outbox {
            Some(outbox) => outbox.put_with(store, write).await,
            None => {
                let (out, reports) = store.blocking(move |s| s.write(write)).await?;
                for msg in reports {
                    self.send(msg).await?;
                }
                Ok(out)
            }
        }
    }

    /// Like [`report`](Self::report), for callers that cannot wait (e.g. the event recorder):
    /// hands `msg` to edgehub's outbox writer through a bounded queue
    /// (`upstream_queue`); the commit follows shortly, in queue order. A detached handle
    /// queues `msg` like [`try_send`](Self::try_send).
    ///
    /// # Errors
    /// [`QueueFull`](crate::error::Error::QueueFull) when the writer's queue is full (the report is not queued);
    /// [`HubStopped`](crate::error::Error::HubStopped) once edgehub has stopped. An [`OutboxFull`](verge_edge_store::Error::OutboxFull) refusal of
    /// the commit is only logged.
    pub fn try_report(&self, msg: Envelope) -> Result<()> {
        match &self.outbox {
            Some(outbox) => outbox.try_put(msg),
            None => self.try_send(msg),
        }
    }

    /// Queues a transient `msg` (an answer, a query, a lease renewal), waiting while the queue is full (back-pressure).
    ///
    /// # Errors
    /// [`HubStopped`](crate::error::Error::HubStopped) once edgehub has stopped.
    pub async fn send(&self, msg: Envelope) -> Result<()> {
        self.tx.send(msg).await.map_err(|_| HubError::HubStopped)
    }

    /// Queues a transient `msg` without waiting.
    ///
    /// # Errors
    /// [`QueueFull`](crate::error::Error::QueueFull) when the queue is full (the message is not queued);
    /// [`HubStopped`](crate::error::Error::HubStopped) once edgehub has stopped.
    pub fn try_send(&self, msg: Envelope) -> Result<()> {
        try_send(&self.tx, msg)
    }

    /// A handle that is not connected to an [`EdgeHub`]: upstream messages go to the returned
    /// receiver (bounded by `capacity`) and no session is ever announced. For embedding
    /// modules without a cloud link, and for tests that capture upstream messages.
    pub fn detached(capacity: usize) -> (Self, mpsc::Receiver<Envelope>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (sessions_tx, sessions) = watch::channel(None);
        let handle = Self {
            tx,
            outbox: None,
            sessions,
            // Kept alive so `sessions().changed()` waits instead of failing.
            _detached: Some(Arc::new(sessions_tx)),
        };
        (handle, rx)
    }

    /// Whether a cloudhub session is up now (a detached handle counts as connected: its
    /// receiver stands in for the cloud).
    pub fn connected(&self) -> bool {
        self._detached.is_some() || self.sessions.borrow().is_some()
    }

    /// The current session (`None` while disconnected); changes on every connect/disconnect.
    pub fn sessions(&self) -> watch::Receiver<Option<SessionInfo>> {
        self.sessions.clone()
    }
}

/// The edgehub component; see the module docs.
#[derive(Debug)]
pub struct EdgeHub {
    config: Arc<HubSettings>,
    store: MetaStore,
    upstream: mpsc::Receiver<Envelope>,
    downstream: mpsc::Sender<Envelope>,
    sessions: watch::Sender<Option<SessionInfo>>,
    /// The handles' outbox; the drain waits on [`Outbox::notified`].
    outbox: Outbox,
    /// The queue of [`EdgeHubHandle::try_report`], until `run` starts the writer.
    queued: Option<mpsc::Receiver<outbox::Queued>>,
    generation: u64,
    /// The node's key and certificate, read for every connection.
    credentials: crate::certificates::Credentials,
    /// Where cloudhub's tunnel requests go (`None`: streaming is off).
    tunnels: Option<crate::tunnel::TunnelRequests>,
    /// Where cloudhub's tunnel requests to this node's pods go (`OpenTunnel.dial`; `None`:
    /// refused).
    pod_tunnels: Option<crate::tunnel::TunnelRequests>,
}

impl EdgeHub {
    /// Creates edgehub and its handle. Downstream messages are sent to `downstream`
    /// (metamanager's queue); the hello's inventory is read from `store`, which also holds
    /// the outbox.
    pub fn new(
        config: Arc<HubSettings>,
        store: MetaStore,
        downstream: mpsc::Sender<Envelope>,
    ) -> (Self, EdgeHubHandle) {
        let (tx, upstream) = mpsc::channel(config.edge_hub.upstream_queue);
        let (sessions, sessions_rx) = watch::channel(None);
        let (outbox, queued) = Outbox::new(
            store.clone(),
            verge_edge_store::OutboxLimits {
                max_entries: config.edge_hub.outbox.max_entries,
                max_source_bytes: config.edge_hub.outbox.max_source_bytes,
            },
            config.edge_hub.upstream_queue,
        );
        let handle = EdgeHubHandle {
            tx,
            outbox: Some(outbox.clone()),
            sessions: sessions_rx,
            _detached: None,
        };
        (
            Self {
                credentials: crate::certificates::Credentials::of(&config),
                config,
                store,
                upstream,
                downstream,
                sessions,
                outbox,
                queued: Some(queued),
                generation: 0,
                tunnels: None,
                pod_tunnels: None,
            },
            handle,
        )
    }

    /// Hands cloudhub's tunnel requests (kubectl logs, exec, ...) to `tunnels`, the
    /// edgecore's streaming server.
    #[must_use]
    pub fn with_tunnels(mut self, tunnels: crate::tunnel::TunnelRequests) -> Self {
        self.tunnels = Some(tunnels);
        self
    }

    /// Hands cloudhub's tunnel requests to this node's pods (`OpenTunnel.dial`: another edge
    /// node's pod reaching a Service endpoint here) to `tunnels`, edgecore's Service tunnel.
    #[must_use]
    pub fn with_pod_tunnels(mut self, tunnels: crate::tunnel::TunnelRequests) -> Self {
        self.pod_tunnels = Some(tunnels);
        self
    }

    /// Keeps a session with cloudhub open until `shutdown` is cancelled, reconnecting with
    /// backoff. Connection failures are logged and retried, never returned.
    ///
    /// # Errors
    /// [`CloudhubAddress`](crate::error::Error::CloudhubAddress) if `cloudhub` or an alternate is not a URI.
    #[tracing::instrument(name = "edgehub", skip_all, fields(node = %self.config.node_name))]
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        let endpoints = session::endpoints(&self.config)?;
        let mut attempt = 0usize;
        let writer = self.queued.take().map(|queued| {
            verge_runtime::tasks::spawn(
                "outbox writer",
                self.outbox.clone().write_queued(queued, shutdown.clone()),
            )
        });
        let mut backoff = Backoff::new(
            self.config.edge_hub.reconnect_initial_backoff,
            self.config.edge_hub.reconnect_max_backoff,
        );
        loop {
            let (address, endpoint) = &endpoints[attempt % endpoints.len()];
            attempt = attempt.wrapping_add(1);
            let ended = self
                .session(endpoint, &shutdown)
                .instrument(info_span!("session", cloudhub = %address))
                .await;
            self.sessions.send_replace(None);
            let (established, error) = match ended {
                session::Ended::Shutdown => break,
                session::Ended::Failed { established, error } => (established, error),
            };
            if established {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            let next = &endpoints[attempt % endpoints.len()].0;
            warn!(error = %ErrorChain(&error), cloudhub = %address, ?delay, %next,
                "cloudhub session ended; reconnecting");
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        if let Some(writer) = writer {
            // Commits what is still queued; a panic there was already reported.
            let _ = writer.await;
        }
        info!("edgehub stopped");
        Ok(())
    }
}

/// Queues `value` on `tx` without waiting: [`QueueFull`](crate::error::Error::QueueFull) when full,
/// [`HubStopped`](crate::error::Error::HubStopped) when the receiver is gone.
fn try_send<T>(tx: &mpsc::Sender<T>, value: T) -> Result<()> {
    tx.try_send(value).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => HubError::QueueFull {
            capacity: tx.max_capacity(),
        },
        mpsc::error::TrySendError::Closed(_) => HubError::HubStopped,
    })
}
