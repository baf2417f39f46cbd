//! The error type of `verge-edgecontroller`.

/// Everything that can go wrong in edgecontroller. Each variant keeps its cause.
///
/// Errors of a single upstream message ([`Error::Route`], [`Error::Decode`],
/// [`Error::Forbidden`], [`Error::NotReferenced`], [`Error::NotInNamespace`],
/// [`Error::CachesNotSynced`],
/// [`Error::Unsupported`], [`Error::NodeNotFound`], [`Error::Kube`]) are answered to the edge
/// as an `error` message whose content is [`Error::reason`]; they never stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An invalid cloudhub address, `cloudhub_service` or `leaderElection` at start, or the
    /// leader Lease lost while leading (the shared ControllerHub client,
    /// `verge-controller`).
    #[error(transparent)]
    Hub(#[from] verge_controller::Error),
    /// A message is not a valid envelope (the field named by the cause, e.g. its operation,
    /// group or resource path, does not parse).
    #[error("malformed route")]
    Route(#[from] verge_proto::Error),
    /// A message's content is not the JSON of the expected Kubernetes object.
    #[error("content is not a valid {kind} JSON")]
    Decode {
        /// The expected kind, e.g. `"v1.Node"`.
        kind: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A node tried to write an object that is not its own (another node's Node, NodeStatus
    /// or Lease), or a path does not match the object it carries. Nothing was changed.
    #[error("node {node:?} may not write {what}")]
    Forbidden {
        /// The session's node.
        node: String,
        /// What it tried to write.
        what: String,
    },
    /// A node asked for an object no pod bound to it references (a configmap or secret, or a
    /// token for a service account its pods do not use). Nothing was read.
    #[error("forbidden: node {node:?} has no pod referencing {what}")]
    NotReferenced {
        /// The session's node.
        node: String,
        /// What it asked for.
        what: String,
    },
    /// A node asked for the Services of a namespace where no pod bound to it lives (other
    /// than the master service of `default`, which every node may read). Nothing was read.
    #[error(
        "forbidden: node {node:?} has no pod in namespace {namespace:?}, so may not list its services"
    )]
    NotInNamespace {
        /// The session's node.
        node: String,
        /// The namespace it asked for.
        namespace: String,
    },
    /// The watch caches have not completed their first list yet; the edge retries.
    #[error("watch caches not synced yet")]
    CachesNotSynced,
    /// The operation/resource combination is not served (yet).
    #[error("unsupported {operation} of {resource:?}")]
    Unsupported {
        /// The message's operation.
        operation: String,
        /// The message's resource path.
        resource: String,
    },
    /// The Node object does not exist (a status or lease arrived before registration).
    #[error("node {0:?} is not registered")]
    NodeNotFound(String),
    /// A Kubernetes API call failed.
    #[error("API server: {action} failed")]
    Kube {
        /// What was attempted, e.g. `"create node"`.
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
