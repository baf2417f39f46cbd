//! The errors of metamanager: downstream messages and cloud queries (the store's own errors
//! are [`verge_edge_store::Error`]).

/// What can go wrong in metamanager. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A downstream message handed to the store is not an object upsert or delete.
    #[error("{operation} is not an object message")]
    NotAnObject {
        /// The message's operation.
        operation: verge_core::Operation,
    },
    /// A downstream object's content is not JSON (the edge refuses it; nothing is stored).
    #[error("content is not JSON")]
    ContentNotJson(#[source] serde_json::Error),
    /// A cloud query was not sent because no cloudhub session is up (edgecore is offline).
    #[error("cannot query {resource}: not connected to cloudhub (offline)")]
    CloudUnreachable {
        /// The queried edge path.
        resource: String,
    },
    /// The cloud answered a `query` with `error` (its UTF-8 reason, e.g. the object is not
    /// referenced by a pod of this node).
    #[error("cloud refused query of {resource}: {reason}")]
    QueryRefused {
        /// The queried edge path, e.g. `ns/configmap/cfg`.
        resource: String,
        /// The cloud's reason.
        reason: String,
    },
    /// No answer to a `query` arrived in time (e.g. the cloud is unreachable).
    #[error("no answer from the cloud to the query of {resource} within {timeout:?}")]
    QueryTimeout {
        /// The queried edge path.
        resource: String,
        /// How long edged waited.
        timeout: std::time::Duration,
    },
    /// The edge store failed.
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// edgehub refused a message (its queue is full) or has stopped.
    #[error(transparent)]
    EdgeHub(#[from] verge_edgehub::Error),
}

/// metamanager's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
