//! The error type of `verge-devicecontroller`.

/// Everything that can go wrong in devicecontroller. Each variant keeps its cause.
///
/// Errors of a single upstream message ([`Error::Route`], [`Error::Decode`],
/// [`Error::Forbidden`], [`Error::Unsupported`], [`Error::NoUid`], [`Error::Kube`]) are
/// answered to the edge as an `error` message whose content is [`Error::reason`]; they never
/// stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An invalid cloudhub address, `cloudhub_service` or `leaderElection` at start, or the
    /// leader Lease lost while leading (the shared ControllerHub client,
    /// `verge-controller`).
    #[error(transparent)]
    Hub(#[from] verge_controller::Error),
    /// A message is not a valid envelope, or its path is not `node/<node>/<ns>/<type>/<name>`.
    #[error("malformed route")]
    Route(#[from] verge_proto::Error),
    /// A message's content is not the expected JSON.
    #[error("content is not a valid {kind} JSON")]
    Decode {
        /// The expected content, e.g. `"device status report"`.
        kind: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A node reported for an object that is not its own (a Device bound to another node,
    /// or a path naming another node). Nothing was changed.
    #[error("node {node:?} may not write {what}")]
    Forbidden {
        /// The session's node.
        node: String,
        /// What it tried to write.
        what: String,
    },
    /// The operation/resource combination is not served.
    #[error("unsupported {operation} of {resource:?}")]
    Unsupported {
        /// The message's operation.
        operation: String,
        /// The message's resource path.
        resource: String,
    },
    /// A status report carries no Device uid (`header.uid`), so it cannot be matched to the
    /// Device it was made for.
    #[error("the report of {0} carries no device uid")]
    NoUid(String),
    /// A Kubernetes API call failed.
    #[error("API server: {action} failed")]
    Kube {
        /// What was attempted, e.g. `"apply devicestatus"`.
        action: &'static str,
        /// The kube-rs error (an `ApiError` carries the server's status and reason).
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The error and its chain of causes, joined by `": "`; the UTF-8 reason sent to the edge
    /// in an `error` answer.
    pub fn reason(&self) -> String {
        verge_controller::error::reason(self)
    }

    /// Wraps a kube-rs error with the action that failed.
    pub(crate) fn kube(action: &'static str) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kube { action, source }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
