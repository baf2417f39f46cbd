//! The errors of the eventbus: its configuration, encoding, and publishing.

use std::path::PathBuf;

use super::address::AddressError;

/// What can go wrong in the eventbus. Request failures are not here: they are answered on
/// MQTT ([`RequestError`](super::RequestError)). Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `eventBus.mqttServer` is not a usable address.
    #[error("invalid eventBus.mqttServer")]
    Address(#[from] AddressError),
    /// `eventBus.passwordFile` cannot be read.
    #[error("cannot read the MQTT password file {path}")]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// A payload could not be encoded as JSON.
    #[error("cannot encode {what} as JSON")]
    Encode {
        /// The payload kind, e.g. `twin delta`.
        what: &'static str,
        /// The serializer's failure.
        #[source]
        source: serde_json::Error,
    },
    /// The publish queue is full (the broker is down or slow); the message was dropped.
    #[error("eventbus publish queue full; message to {topic} dropped")]
    QueueFull {
        /// The message's topic.
        topic: String,
    },
    /// The eventbus has stopped; nothing more can be published.
    #[error("eventbus stopped")]
    Stopped,
}

/// The eventbus's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
