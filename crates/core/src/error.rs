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
    /// A resource type Verge does not know.
    #[error("unknown resource type {0:?}")]
    UnknownResourceType(String),
    /// A message id is empty.
    #[error("empty message id")]
    EmptyMessageId,
    /// A message names no source module.
    #[error("empty source module")]
    EmptySource,
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
