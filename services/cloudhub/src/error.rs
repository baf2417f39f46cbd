//! The error type of `verge-cloudhub` and its one mapping to [`tonic::Status`].

use std::net::SocketAddr;
use std::time::Duration;

use tonic::{Code, Status};

/// Everything that can go wrong in cloudhub: start-up failures and the reasons a stream
/// (an edge session or a controller attachment) ends.
///
/// Stream errors reach the peer as a gRPC status through `From<Error> for Status`, the only
/// place where cloudhub chooses status codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file could not be parsed (names the offending field).
    #[error(transparent)]
    ConfigFile(#[from] verge_core::ConfigError),

    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}")]
    ConfigRead {
        /// The path given with `--config`.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file named in the configuration could not be read.
    #[error("cannot read {field} {path}")]
    FileRead {
        /// The field naming the file, as written in the YAML file.
        field: &'static str,
        /// The path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A configuration value is out of range.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig {
        /// The field's name as written in the YAML file.
        field: &'static str,
        /// What is wrong with the value.
        reason: &'static str,
    },

    /// A listening address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A gRPC server failed.
    #[error("{server} server failed")]
    Serve {
        /// `"edge"` or `"controller"`.
        server: &'static str,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },

    /// A trust check refused the peer (node identity, controller token, join); its
    /// [`TrustError`](crate::trust::TrustError) picks the gRPC code.
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),

    /// An edge's node name is not a DNS-1123 subdomain (gRPC `INVALID_ARGUMENT`).
    #[error("invalid node name {name:?}: {reason}")]
    InvalidNodeName {
        /// The name as received.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// A controller hello without a name or with unusable groups (gRPC `INVALID_ARGUMENT`).
    #[error("invalid controller hello: {0}")]
    InvalidControllerHello(String),

    /// The first frame of a stream was not a hello, or a later frame was one
    /// (gRPC `INVALID_ARGUMENT`).
    #[error("malformed frame: {0}")]
    UnexpectedFrame(&'static str),

    /// A message without `header.id` (gRPC `INVALID_ARGUMENT`).
    #[error("malformed message: header.id is required")]
    MissingId,

    /// A message whose group, operation or resource path does not parse
    /// (gRPC `INVALID_ARGUMENT`). `id` is the offending message's id.
    #[error("malformed message: {source}")]
    MalformedRoute {
        /// The message's `header.id`.
        id: String,
        /// What is wrong, naming the field.
        #[source]
        source: verge_proto::Error,
    },

    /// A controller addressed a message to one node in `Routed.node` and to another in
    /// the resource path (gRPC `INVALID_ARGUMENT`).
    #[error(
        "message {id:?} is routed to node {routed:?} but its resource {resource:?} names another"
    )]
    NodeMismatch {
        /// The message's `header.id`.
        id: String,
        /// `Routed.node`.
        routed: String,
        /// `route.resource`.
        resource: String,
    },

    /// No hello within the allowed time, or no frame for three keepalive intervals
    /// (gRPC `DEADLINE_EXCEEDED`; KubeEdge cloudhub's `keepalive_interval` timeout).
    #[error("no frame received for {0:?}")]
    Timeout(Duration),

    /// A newer stream for the same node took over this session (gRPC `ABORTED`).
    #[error("replaced by a newer session")]
    Replaced,

    /// The session's Node was deleted or lost the edge label: the session ends (gRPC
    /// `PERMISSION_DENIED`), and a certificate bound to the deleted Node is refused from then
    /// on.
    #[error("the Node was deleted or is no longer a Verge edge node")]
    NodeRemoved,

    /// A newer `ControllerHub.Attach` with the same controller name by the same user took
    /// over (the same replica re-attached, or another replica became the leader); this
    /// stream is ended (gRPC `ABORTED`).
    #[error("replaced by a newer attach of the same controller")]
    ControllerReplaced,

    /// A controller did not take frames fast enough and its bounded control queue (session
    /// events, delivery errors) overflowed; it must reattach to get a fresh session snapshot
    /// (gRPC `RESOURCE_EXHAUSTED`). A full message queue never causes this: it slows the
    /// edges down instead.
    #[error("controller control queue full ({0} frames); reattach to resync")]
    ControllerQueueFull(usize),

    /// This replica already holds `maxSessions` node sessions (gRPC `RESOURCE_EXHAUSTED`); the
    /// edge retries, possibly reaching another replica.
    #[error("cloudhub holds its maximum of {0} node sessions (maxSessions); retry later")]
    TooManySessions(usize),

    /// A hello's inventory has more entries than `maxInventoryEntries` (gRPC
    /// `RESOURCE_EXHAUSTED`).
    #[error("inventory of {entries} entries exceeds maxInventoryEntries ({max})")]
    InventoryTooLarge {
        /// Entries sent.
        entries: usize,
        /// The limit.
        max: usize,
    },

    /// Cloudhub is shutting down; the peer should reconnect, possibly to another replica
    /// (gRPC `UNAVAILABLE`).
    #[error("cloudhub is shutting down")]
    ShuttingDown,

    /// The peer sent a frame larger than `max_frame_bytes` (gRPC `RESOURCE_EXHAUSTED`; tonic's
    /// decoder reports it as `OUT_OF_RANGE`, the message is kept).
    #[error("frame too large: {0}")]
    FrameTooLarge(String),

    /// The peer sent a frame that is not valid protobuf (gRPC `INVALID_ARGUMENT`; tonic's
    /// decoder reports it as `INTERNAL`, the message is kept).
    #[error("malformed frame: {0}")]
    UndecodableFrame(String),

    /// The peer's stream failed otherwise at the gRPC or HTTP/2 layer (reset, cancelled);
    /// the status is passed through.
    #[error("stream error: {0}")]
    Stream(Status),
}

impl Error {
    /// Classifies an error read from a peer's inbound stream (see
    /// [`Error::FrameTooLarge`], [`Error::UndecodableFrame`], [`Error::Stream`]).
    pub fn from_inbound(status: Status) -> Self {
        match status.code() {
            Code::OutOfRange | Code::ResourceExhausted => {
                Self::FrameTooLarge(status.message().to_owned())
            }
            Code::Internal => Self::UndecodableFrame(status.message().to_owned()),
            _ => Self::Stream(status),
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A wire message that is not a valid envelope: [`Error::MissingId`] without `header.id`,
/// else [`Error::MalformedRoute`].
impl From<verge_proto::Error> for Error {
    fn from(source: verge_proto::Error) -> Self {
        match source {
            verge_proto::Error::Missing {
                field: "header.id", ..
            } => Self::MissingId,
            source => Self::MalformedRoute {
                id: source.message_id().to_owned(),
                source,
            },
        }
    }
}

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::Trust(error) => Status::from(error),
            Error::InvalidNodeName { .. }
            | Error::InvalidControllerHello(_)
            | Error::UnexpectedFrame(_)
            | Error::MissingId
            | Error::MalformedRoute { .. }
            | Error::NodeMismatch { .. }
            | Error::UndecodableFrame(_) => Status::invalid_argument(message),
            Error::Timeout(_) => Status::deadline_exceeded(message),
            Error::Replaced | Error::ControllerReplaced => Status::aborted(message),
            Error::NodeRemoved => Status::permission_denied(message),
            Error::ControllerQueueFull(_)
            | Error::FrameTooLarge(_)
            | Error::TooManySessions(_)
            | Error::InventoryTooLarge { .. } => Status::resource_exhausted(message),
            Error::ShuttingDown => Status::unavailable(message),
            Error::Stream(status) => status,
            Error::ConfigFile(_)
            | Error::ConfigRead { .. }
            | Error::FileRead { .. }
            | Error::InvalidConfig { .. }
            | Error::Bind { .. }
            | Error::Serve { .. } => Status::internal(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(Status::from(Error::Replaced).code(), Code::Aborted);
        assert_eq!(
            Status::from(Error::Replaced).message(),
            "replaced by a newer session"
        );
        assert_eq!(Status::from(Error::MissingId).code(), Code::InvalidArgument);
        let decode = Error::from_inbound(Status::internal("failed to decode Protobuf message"));
        assert_eq!(Status::from(decode).code(), Code::InvalidArgument);
        let big = Error::from_inbound(Status::out_of_range("decoded message length too large"));
        assert_eq!(Status::from(big).code(), Code::ResourceExhausted);
        let reset = Error::from_inbound(Status::cancelled("h2 reset"));
        assert_eq!(Status::from(reset).code(), Code::Cancelled);
    }
}
