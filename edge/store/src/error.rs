//! The errors of the edge store.

/// What can go wrong in the store. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    #[error("edge store failed")]
    Store(#[source] redb::Error),
    /// A stored object's key could not be decoded (corrupted or written by an incompatible
    /// version).
    #[error("stored record for {key} is unreadable")]
    StoredRecord {
        /// The record's key.
        key: String,
        /// The decoding failure.
        #[source]
        source: verge_core::Error,
    },
    /// A message handed to the outbox is not a durable report (it has no [`crate::OutboxKey`]:
    /// only pod status and deletions, node registration, status and Lease, device status and
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
    /// The report's source (`event`, `app/<group>`) holds `max_source_bytes` of waiting
    /// reports already: this one was refused, nothing changed.
    #[error(
        "upstream outbox: source {source_name} holds {bytes} bytes of reports: report {key} refused"
    )]
    OutboxSourceFull {
        /// The refused report's key.
        key: String,
        /// The source (`event`, `app/<group>`).
        source_name: String,
        /// The bytes its waiting reports hold.
        bytes: u64,
    },
    /// A blocking task (store access) panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
}

impl Error {
    /// Whether this is the outbox refusing a droppable report because it is full
    /// ([`Error::OutboxFull`]) or its source's bytes are used up ([`Error::OutboxSourceFull`]);
    /// the report was dropped and should be logged, nothing else.
    pub fn is_outbox_full(&self) -> bool {
        matches!(
            self,
            Self::OutboxFull { .. } | Self::OutboxSourceFull { .. }
        )
    }
}

/// The store's result type.
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
