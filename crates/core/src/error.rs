//! The error type of `verge-core`.

/// Errors of parsing the message model.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A resource path does not have the expected shape.
    #[error("malformed resource path {path:?}: {reason}")]
    ResourcePath {
        /// The path as received.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A route names an operation Verge does not know.
    #[error("unknown operation {0:?}")]
    UnknownOperation(String),
    /// A route names a controller group Verge does not know.
    #[error("unknown group {0:?}")]
    UnknownGroup(String),
    /// A third-party group name that is malformed or reserved ([`crate::AppGroup`]).
    #[error("invalid group {group:?}: {reason}")]
    InvalidGroup {
        /// The name as given (at most 71 characters of it).
        group: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A resource type Verge does not know.
    #[error("unknown resource type {0:?}")]
    UnknownResourceType(String),
    /// A message id is empty.
    #[error("empty message id")]
    EmptyMessageId,
    /// A message id is longer than the bound.
    #[error("message id of {len} bytes, longer than {max}")]
    MessageIdTooLong {
        /// Its length in bytes.
        len: usize,
        /// The bound ([`crate::envelope::MAX_MESSAGE_ID_BYTES`]).
        max: usize,
    },
    /// A message names no source module.
    #[error("empty source module")]
    EmptySource,
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
