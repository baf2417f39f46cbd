//! edgehub: the client end of cloudhub's `EdgeHub.Connect` stream (KubeEdge: edgehub).
//!
//! [`EdgeHub::run`] keeps one session open at a time: connect, send `EdgeHello` (node name,
//! token, the metamanager's inventory, version), wait for `Welcome`, then pump messages both
//! ways and send a `keepalive` every `Welcome.keepalive_interval_ms`. The session ends when
//! the stream fails or closes, or after three keepalive intervals without any frame from
//! cloudhub; edgehub then reconnects after a jittered exponential [`Backoff`] (reset after
//! every session that got its `Welcome`).
//!
//! Other modules send upstream through an [`EdgeHubHandle`] (a bounded queue that outlives
//! sessions) and learn about sessions from [`EdgeHubHandle::sessions`]. Downstream messages
//! go to metamanager through a bounded channel. Upstream delivery is at-most-once for now:
//! a message taken from the queue is lost if the session breaks before it is written; the
//! redb outbox (removed on the cloud's ack) will make reports at-least-once.

mod backoff;
mod session;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_proto::Message;

pub use backoff::Backoff;

use crate::config::Config;
use crate::metamanager::MetaStore;
use crate::{Error, Result};

/// Keepalive interval used when `Welcome.keepalive_interval_ms` is 0.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);

/// An established session, as published to other modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// cloudhub's `Welcome.session_id`.
    pub session_id: String,
    /// Counts sessions of this edgecore, from 1; changes on every reconnect.
    pub generation: u64,
    /// The keepalive interval cloudhub asked for.
    pub keepalive: Duration,
}

/// Sends messages upstream; cheap to clone. Messages queue while no session is open.
#[derive(Debug, Clone)]
pub struct EdgeHubHandle {
    tx: mpsc::Sender<Message>,
    sessions: watch::Receiver<Option<SessionInfo>>,
    _detached: Option<Arc<watch::Sender<Option<SessionInfo>>>>,
}

impl EdgeHubHandle {
    /// Queues `msg`, waiting while the queue is full (back-pressure).
    ///
    /// # Errors
    /// [`Error::HubStopped`] once edgehub has stopped.
    pub async fn send(&self, msg: Message) -> Result<()> {
        self.tx.send(msg).await.map_err(|_| Error::HubStopped)
    }

    /// Queues `msg` without waiting.
    ///
    /// # Errors
    /// [`Error::QueueFull`] when the queue is full (the message is not queued);
    /// [`Error::HubStopped`] once edgehub has stopped.
    pub fn try_send(&self, msg: Message) -> Result<()> {
        self.tx.try_send(msg).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Error::QueueFull {
                capacity: self.tx.max_capacity(),
            },
            mpsc::error::TrySendError::Closed(_) => Error::HubStopped,
        })
    }

    /// A handle that is not connected to an [`EdgeHub`]: upstream messages go to the returned
    /// receiver (bounded by `capacity`) and no session is ever announced. For embedding
    /// modules without a cloud link, and for tests that capture upstream messages.
    pub fn detached(capacity: usize) -> (Self, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (sessions_tx, sessions) = watch::channel(None);
        let handle = Self {
            tx,
            sessions,
            // Kept alive so `sessions().changed()` waits instead of failing.
            _detached: Some(Arc::new(sessions_tx)),
        };
        (handle, rx)
    }

    /// The current session (`None` while disconnected); changes on every connect/disconnect.
    pub fn sessions(&self) -> watch::Receiver<Option<SessionInfo>> {
        self.sessions.clone()
    }
}

/// The edgehub component; see the module docs.
#[derive(Debug)]
pub struct EdgeHub {
    config: Arc<Config>,
    store: MetaStore,
    upstream: mpsc::Receiver<Message>,
    downstream: mpsc::Sender<Message>,
    sessions: watch::Sender<Option<SessionInfo>>,
    generation: u64,
}

impl EdgeHub {
    /// Creates edgehub and its handle. Downstream messages are sent to `downstream`
    /// (metamanager's queue); the hello's inventory is read from `store`.
    pub fn new(
        config: Arc<Config>,
        store: MetaStore,
        downstream: mpsc::Sender<Message>,
    ) -> (Self, EdgeHubHandle) {
        let (tx, upstream) = mpsc::channel(config.upstream_queue);
        let (sessions, sessions_rx) = watch::channel(None);
        let handle = EdgeHubHandle {
            tx,
            sessions: sessions_rx,
            _detached: None,
        };
        (
            Self {
                config,
                store,
                upstream,
                downstream,
                sessions,
                generation: 0,
            },
            handle,
        )
    }

    /// Keeps a session with cloudhub open until `shutdown` is cancelled, reconnecting with
    /// backoff. Connection failures are logged and retried, never returned.
    ///
    /// # Errors
    /// [`Error::CloudhubAddress`] if the configured address is not a URI.
    #[tracing::instrument(name = "edgehub", skip_all, fields(node = %self.config.node_name))]
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        let endpoint = session::endpoint(&self.config)?;
        let mut backoff = Backoff::new(
            self.config.reconnect_initial_backoff,
            self.config.reconnect_max_backoff,
        );
        loop {
            let ended = self.session(&endpoint, &shutdown).await;
            self.sessions.send_replace(None);
            let (established, error) = match ended {
                session::Ended::Shutdown => break,
                session::Ended::Failed { established, error } => (established, error),
            };
            if established {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            warn!(error = %DisplayChain(&error), ?delay, "cloudhub session ended; reconnecting");
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        info!("edgehub stopped");
        Ok(())
    }
}

/// Displays an error with its `source` chain: `a: b: c`.
pub(crate) struct DisplayChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for DisplayChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
