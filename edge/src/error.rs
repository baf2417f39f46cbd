//! The error type of `verge-edgecore`.

use std::path::PathBuf;

/// Everything that can go wrong in edgecore. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cloud query was not sent because no cloudhub session is up (edgecore is offline).
    #[error("cannot query {resource}: not connected to cloudhub (offline)")]
    CloudUnreachable {
        /// The queried edge path.
        resource: String,
    },

    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}")]
    ConfigRead {
        /// The file's path.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid YAML for [`crate::Config`] (names the field).
    #[error(transparent)]
    ConfigParse(#[from] verge_core::ConfigError),
    /// A configuration value parsed but is not usable.
    #[error("invalid configuration field `{field}`: {reason}")]
    ConfigValue {
        /// The offending field, e.g. `system_reserved.cpu`.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The data directory could not be created or used.
    #[error("cannot use data directory {path}")]
    DataDir {
        /// The directory.
        path: PathBuf,
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
    /// The outbox is full: a droppable report (an event) with a new key was refused
    /// (`outbox.max_entries`). Statuses and deletions are never refused.
    #[error("upstream outbox full ({entries} entries): report {key} refused")]
    OutboxFull {
        /// The refused report's key.
        key: String,
        /// How many entries wait.
        entries: u64,
    },
    /// A blocking task (store access, host fact collection) panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
    /// The cloudhub address is not a valid URI.
    #[error("invalid cloudhub address {address:?}")]
    CloudhubAddress {
        /// The address as configured.
        address: String,
        /// The parse failure.
        #[source]
        source: tonic::transport::Error,
    },
    /// The TCP/HTTP2 connection to cloudhub failed.
    #[error("cannot connect to cloudhub")]
    Connect(#[source] tonic::transport::Error),
    /// Cloudhub ended the stream with an error status (or refused it).
    #[error("cloudhub stream failed")]
    Stream(#[source] tonic::Status),
    /// Cloudhub broke the handshake or the protocol (e.g. no `Welcome` as first frame).
    #[error("protocol violation by cloudhub: {0}")]
    Protocol(&'static str),
    /// No frame arrived from cloudhub for three keepalive intervals (or the handshake timed out).
    #[error("cloudhub silent for {0:?}")]
    Timeout(std::time::Duration),
    /// Cloudhub closed the stream.
    #[error("cloudhub closed the stream")]
    StreamClosed,
    /// The upstream queue is full; the message was not queued (back-pressure).
    #[error("upstream queue full ({capacity} messages)")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// edgehub has stopped; nothing more can be sent.
    #[error("edgehub stopped")]
    HubStopped,
    /// A module of edgecore panicked (the panic was printed); the others were stopped.
    #[error("module {module} panicked")]
    ModulePanicked {
        /// The module's name (`edgehub`, `metamanager`, `edged`, `node`).
        module: &'static str,
    },
    /// An object could not be encoded as JSON.
    #[error("cannot encode {what} as JSON")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The serializer's failure.
        #[source]
        source: serde_json::Error,
    },
    /// A container runtime call failed (edged's runtime; the call and the engine's error
    /// are in it).
    #[error(transparent)]
    Runtime(#[from] crate::edged::runtime::RuntimeError),
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
    /// A stored or received object is not the JSON it should be.
    #[error("cannot decode {what}")]
    Decode {
        /// What was decoded, e.g. `configmap ns/cfg`.
        what: String,
        /// The parser's failure.
        #[source]
        source: serde_json::Error,
    },
    /// A container's configuration cannot be built (kubelet `CreateContainerConfigError`);
    /// the message is the kubelet's, e.g. `configmap "cfg" not found`.
    #[error("{0}")]
    ContainerConfig(String),
    /// A pod volume cannot be set up, mounted or removed (edged's volumes).
    #[error(transparent)]
    Volume(#[from] crate::edged::volumes::VolumeError),
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<redb::Error> for Error {
    fn from(e: redb::Error) -> Self {
        Self::Store(e)
    }
}

macro_rules! store_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Self::Store(e.into())
            }
        }
    )*};
}
store_error!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
