//! The errors of edgehub: the cloudhub address, the connection, the stream and its queues.

/// What can go wrong in edgehub. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cloudhub address is not a valid URI.
    #[error("invalid cloudhub address {address:?}")]
    CloudhubAddress {
        /// The address as configured.
        address: String,
        /// Why it cannot be used.
        #[source]
        source: verge_proto::transport::EndpointError,
    },
    /// The node's credentials are missing, expired or unreadable.
    #[error("node credentials")]
    Credentials(#[from] crate::certificates::Error),
    /// The TCP/TLS/HTTP2 connection to cloudhub failed.
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
    /// An outbox entry's wire encoding could not be decoded (corrupted or written by an
    /// incompatible version).
    #[error("outbox entry {key} is unreadable")]
    OutboxRecord {
        /// The entry's key.
        key: String,
        /// The decoding failure.
        #[source]
        source: verge_proto::Error,
    },
    /// The edge store failed or refused a report (e.g. a full outbox).
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// edgehub has stopped; nothing more can be sent.
    #[error("edgehub stopped")]
    HubStopped,
}

impl Error {
    /// Whether this is the outbox refusing a droppable report because it is full
    /// ([`OutboxFull`](verge_edge_store::Error::OutboxFull)).
    pub fn is_outbox_full(&self) -> bool {
        matches!(self, Self::Store(error) if error.is_outbox_full())
    }
}

/// edgehub's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
