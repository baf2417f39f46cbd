//! The error type of `verge-proto`: why a wire message is not a valid [`verge_core::Envelope`].

/// A wire message that cannot be read as an [`verge_core::Envelope`]. Every variant names the
/// offending field (`header.id`, `route.source`, `route.group`, `route.operation`,
/// `route.resource`, `header.parent_id`) and the message's `header.id` as received (empty
/// when that is what is missing), so the receiver can answer `error` to it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A required field is missing or empty.
    #[error("message {id:?}: {field} is missing")]
    Missing {
        /// The message's `header.id`, or empty.
        id: String,
        /// The missing field.
        field: &'static str,
    },
    /// A field does not parse.
    #[error("message {id:?}: invalid {field}: {source}")]
    Invalid {
        /// The message's `header.id`.
        id: String,
        /// The invalid field.
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: verge_core::Error,
    },
    /// Bytes that are not a protobuf `Message` (a stored record, see
    /// [`crate::envelope::decode`]).
    #[error("undecodable message")]
    Decode(#[source] prost::DecodeError),
}

impl Error {
    /// The offending message's `header.id` as received (`""` when missing or unknown).
    pub fn message_id(&self) -> &str {
        match self {
            Self::Missing { id, .. } | Self::Invalid { id, .. } => id,
            Self::Decode(_) => "",
        }
    }

    /// The offending field, e.g. `"route.resource"` (`"message"` for undecodable bytes).
    pub fn field(&self) -> &'static str {
        match self {
            Self::Missing { field, .. } | Self::Invalid { field, .. } => field,
            Self::Decode(_) => "message",
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
