//! The errors of devicetwin: bad reports from mappers and apps, mapper calls, the DMI socket.

use std::path::PathBuf;

/// What can go wrong in devicetwin. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A report or query names a Device this node does not hold.
    #[error("device {namespace}/{name} is not known on this node")]
    UnknownDevice {
        /// The namespace given.
        namespace: String,
        /// The name given.
        name: String,
    },
    /// A report names a property the Device does not have (`spec.properties[].name`).
    #[error("device {namespace}/{name} has no property {property:?}")]
    UnknownProperty {
        /// The Device's namespace.
        namespace: String,
        /// The Device's name.
        name: String,
        /// The property named in the report.
        property: String,
    },
    /// A twin report carries no twins.
    #[error("report for device {namespace}/{name} carries no twins")]
    NoTwins {
        /// The Device's namespace.
        namespace: String,
        /// The Device's name.
        name: String,
    },
    /// A reported value (with its metadata) is larger than accepted.
    #[error(
        "value of property {property:?} is {bytes} bytes (at most {max}) or has too many metadata entries"
    )]
    ValueTooLarge {
        /// The property.
        property: String,
        /// The value's size with its metadata.
        bytes: usize,
        /// The bound ([`super::twin::MAX_VALUE_BYTES`]).
        max: usize,
    },
    /// A reported device state is not one of [`super::twin::STATES`].
    #[error(
        "device state {state:?} is not one of online, offline, ok, unknown, disconnected, error, unhealthy"
    )]
    InvalidState {
        /// The state as reported.
        state: String,
    },
    /// A DMI request lacks a required field (e.g. an empty mapper name or device name).
    #[error("invalid request: {field} is empty")]
    EmptyField {
        /// The request field, e.g. `mapper.protocol`.
        field: &'static str,
    },
    /// The change was valid but could not be committed (the store failed); nothing of the
    /// batch it was part of is stored.
    #[error("twin change not stored")]
    NotStored(#[source] std::sync::Arc<crate::error::Error>),
    /// The twin writer task has stopped (edgecore is shutting down).
    #[error("devicetwin has stopped")]
    Stopped,
    /// A call to a mapper failed (its socket is unreachable, it answered an error, or the
    /// call timed out).
    #[error("{call} on the mapper of protocol {protocol:?} at {address} failed")]
    MapperCall {
        /// The mapper's protocol.
        protocol: String,
        /// Its socket path.
        address: String,
        /// The DMI method, e.g. `RegisterDevice`.
        call: &'static str,
        /// The gRPC status (`UNAVAILABLE` when the socket cannot be reached).
        #[source]
        source: tonic::Status,
    },
    /// A Device or its model cannot be given to a mapper (see the device checks).
    #[error("device {namespace}/{name} cannot be given to a mapper")]
    InvalidDevice {
        /// The Device's namespace.
        namespace: String,
        /// The Device's name.
        name: String,
        /// The problem.
        #[source]
        source: verge_device_api::Invalid,
    },
    /// A stored Device or DeviceModel is not the JSON it should be.
    #[error("stored {what} is not valid")]
    StoredObject {
        /// e.g. `device ns/name`.
        what: String,
        /// The parser's failure.
        #[source]
        source: serde_json::Error,
    },
    /// A twin record or mapper record in redb could not be encoded or decoded.
    #[error("devicetwin record {key} is unreadable")]
    Record {
        /// The record's key.
        key: String,
        /// The (de)serializer's failure.
        #[source]
        source: serde_json::Error,
    },
    /// The DMI socket could not be prepared or bound.
    #[error("cannot serve DMI on {path}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The DMI server failed.
    #[error("DMI server failed")]
    Serve(#[source] tonic::transport::Error),
    /// The edge store failed.
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// edgehub refused a report or has stopped.
    #[error(transparent)]
    EdgeHub(#[from] verge_edgehub::Error),
    /// A `deviceTwin:` value parsed but is not usable.
    #[error("invalid configuration field `{field}`: {reason}")]
    Config {
        /// The offending field, e.g. `deviceTwin.dmiSocket`.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A report could not be encoded as JSON.
    #[error("cannot encode {what} as JSON")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The serializer's failure.
        #[source]
        source: serde_json::Error,
    },
}

/// devicetwin's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
