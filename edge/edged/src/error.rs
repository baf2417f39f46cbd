//! The error type of `verge-edged`.

/// Everything that can go wrong in edged and the node agent. Each variant keeps its cause as
/// `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// edgehub refused a report or has stopped.
    #[error(transparent)]
    EdgeHub(#[from] verge_edgehub::Error),
    /// The edge store failed or refused a write (the redb file, a full outbox).
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// metamanager refused a message or a cloud query failed.
    #[error(transparent)]
    MetaManager(#[from] verge_metamanager::Error),
    /// A value of the `edged:` section parsed but is not usable.
    #[error("invalid configuration field `{field}`: {reason}")]
    ConfigValue {
        /// The offending field by its YAML path, e.g. `edged.systemReserved.cpu`.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A blocking task (host fact collection) panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
    /// An object could not be encoded as JSON.
    #[error("cannot encode {what} as JSON")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The serializer's failure.
        #[source]
        source: serde_json::Error,
    },
    /// A container runtime call failed, or its endpoint is unusable (the call and the
    /// engine's error are in it).
    #[error(transparent)]
    Runtime(#[from] verge_container_runtime::RuntimeError),
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
    /// The pod network is not ready for a new sandbox (kubelet: `NetworkNotReady`); the
    /// reason ([`crate::network::NetworkState`]).
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    /// A pod volume cannot be set up, mounted or removed.
    #[error(transparent)]
    Volume(#[from] crate::volumes::VolumeError),
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
