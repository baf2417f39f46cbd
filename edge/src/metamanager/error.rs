//! The errors of metamanager: the redb store, the upstream outbox and cloud queries.

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

    /// The redb file cannot be opened or made private (mode 0600).
    #[error("cannot open the store file {path}")]
    StoreFile {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The redb store failed (open, transaction, table or commit).
    #[error("metamanager store failed")]
    Store(#[source] redb::Error),
    /// A stored record could not be decoded (corrupted or written by an incompatible version).
    #[error("stored record for {key} is unreadable")]
    StoredRecord {
        /// The record's key.
        key: String,
        /// The decoding failure.
        #[source]
        source: verge_core::Error,
    },
    /// An outbox entry could not be decoded (corrupted or written by an incompatible version).
    #[error("outbox entry {key} is unreadable")]
    OutboxRecord {
        /// The entry's key.
        key: String,
        /// The decoding failure.
        #[source]
        source: verge_proto::Error,
    },
    /// A message handed to the outbox is not a durable report (it has no
    /// [`crate::OutboxKey`]: only pod status and deletions, node registration and status and
    /// events are).
    #[error("{message} is not an outbox report")]
    NotAReport {
        /// The message, as `<operation> <path> (<id>)`.
        message: String,
    },
    /// A downstream message of a third-party group names no resource, so no edge app's
    /// topic can carry it (an answer from the controller must name the answered resource).
    #[error(
        "{message} names no resource; edge apps receive messages on the topic of their resource"
    )]
    NotForApps {
        /// The message, as `<operation> <path> (<id>)`.
        message: String,
    },
    /// The outbox is full: a droppable report (an event) with a new key was refused
    /// (`outbox.max_entries`). Statuses and deletions are never refused.
    #[error("upstream outbox full ({entries} entries): report {key} refused")]
    OutboxFull {
        /// The refused report's key.
        key: String,
        /// How many entries wait.
        entries: u64,
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
    /// A blocking task (store access) panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
}

/// metamanager's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
