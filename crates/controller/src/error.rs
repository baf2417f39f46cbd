//! The error type of `verge-controller`.

use std::path::PathBuf;

/// Everything that can go wrong while attaching to cloudhub and routing its frames. Each
/// variant keeps its cause.
///
/// [`Error::Route`] and [`Error::QueueFull`] concern a single upstream message and are
/// answered to the edge as an `error` message whose content is [`Error::reason`]; the
/// connection errors ([`Error::HubAuth`], [`Error::Connect`], [`Error::Attach`]) are logged
/// and retried with backoff; the others stop the controller at start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid YAML for [`crate::Config`] (names the field).
    #[error(transparent)]
    Config(#[from] verge_core::ConfigError),
    /// The configured cloudhub address is not a valid URI.
    #[error("invalid cloudhub address {address:?}")]
    Endpoint {
        /// The address as configured.
        address: String,
        /// Why it cannot be used (e.g. plaintext `http://`).
        #[source]
        source: verge_proto::transport::EndpointError,
    },
    /// `cloudhubService` is not `<namespace>/<service>`.
    #[error("invalid cloudhubService {0:?}: expected <namespace>/<service>")]
    Discovery(String),
    /// Leader election failed: an invalid `leaderElection` configuration at start, or the
    /// Lease was lost while leading (the controller stopped acting).
    #[error(transparent)]
    Leader(#[from] crate::leader::Error),
    /// The Verge CA or the service-account token for cloudhub could not be obtained;
    /// retried with backoff.
    #[error("cannot {what}")]
    HubAuth {
        /// What was attempted.
        what: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Connecting to cloudhub failed (TCP/TLS/HTTP2 level); retried with backoff.
    #[error("cannot connect to cloudhub")]
    Connect(#[source] tonic::transport::Error),
    /// Cloudhub refused or ended the `ControllerHub.Attach` stream with a gRPC status;
    /// retried with backoff.
    #[error("ControllerHub.Attach stream failed")]
    Attach(#[source] tonic::Status),
    /// A message is not a valid envelope (the field named by the cause, e.g. its operation,
    /// group or resource path, does not parse).
    #[error("malformed route")]
    Route(#[from] verge_proto::Error),
    /// The node's queue of pending upstream messages is full (back-pressure; the edge retries
    /// from its outbox).
    #[error("queue of node {node:?} is full ({capacity} messages pending)")]
    QueueFull {
        /// The node.
        node: String,
        /// The configured queue capacity (`node_queue`).
        capacity: usize,
    },
    /// A byte budget of the upstream queues is used up: the node's (`nodeQueueBytes`) or all
    /// nodes' (`queueBytes`); back-pressure, the edge retries from its outbox.
    #[error("queue of node {node:?} is full ({which} budget of {capacity} bytes used up)")]
    QueueBytesFull {
        /// The node.
        node: String,
        /// `"its"` (the node's budget) or `"the controller's"` (all nodes').
        which: &'static str,
        /// The budget's size in bytes.
        capacity: usize,
    },
}

impl Error {
    /// The error and its chain of causes, joined by `": "`; the UTF-8 reason sent to the edge
    /// in an `error` answer.
    pub fn reason(&self) -> String {
        reason(self)
    }
}

/// `error` and its chain of causes, joined by `": "` (the text of an `error` answer).
pub fn reason(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
