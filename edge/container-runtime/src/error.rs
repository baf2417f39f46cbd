//! [`RuntimeError`]: what a [`ContainerRuntime`](super::ContainerRuntime) call can fail with.

/// The engine's own error (bollard's for Docker), kept as the cause.
pub type EngineError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A container runtime call failed. Every variant names the call (`op`, e.g. `create
/// k8s_app_web_default_<uid>_0`) and keeps the engine's error as its source; the variant says
/// what callers may tolerate (the kubelet ignores "not found" when removing, for example).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The container, exec or image does not exist (Docker: HTTP 404).
    #[error("docker: {op} failed")]
    NotFound {
        /// The call, e.g. `inspect <id>`.
        op: String,
        /// The engine's error.
        #[source]
        source: EngineError,
    },
    /// The object is in a conflicting state, e.g. its removal is already in progress or a
    /// container of that name exists (Docker: HTTP 409).
    #[error("docker: {op} failed")]
    Conflict {
        /// The call.
        op: String,
        /// The engine's error.
        #[source]
        source: EngineError,
    },
    /// A pull failed because the engine could not reach the registry at all (DNS failure,
    /// connection refused, no route, timeout), as the engine reports it
    /// ([`registry_unreachable`](crate::image::registry_unreachable)); never for an answer of
    /// the registry (authentication error, unknown manifest, ...).
    #[error("docker: {op} failed")]
    RegistryUnreachable {
        /// The call, e.g. `pull busybox:1.36`.
        op: String,
        /// The engine's error.
        #[source]
        source: EngineError,
    },
    /// Any other failure: the engine is unreachable, refused the request or failed.
    #[error("docker: {op} failed")]
    Engine {
        /// The call.
        op: String,
        /// The engine's error.
        #[source]
        source: EngineError,
    },
}

impl RuntimeError {
    /// The call that failed, e.g. `create exec`.
    pub fn op(&self) -> &str {
        match self {
            Self::NotFound { op, .. }
            | Self::Conflict { op, .. }
            | Self::RegistryUnreachable { op, .. }
            | Self::Engine { op, .. } => op,
        }
    }

    /// Whether the object did not exist (Docker: 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether the object was in a conflicting state (Docker: 409).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether a pull failed because the registry could not be reached
    /// ([`RuntimeError::RegistryUnreachable`]).
    pub fn is_registry_unreachable(&self) -> bool {
        matches!(self, Self::RegistryUnreachable { .. })
    }

    /// Whether a start failed because the container's fixed address
    /// ([`ContainerSpec::ipv4_address`](crate::ContainerSpec::ipv4_address)) is held by a
    /// running container the caller does not know of (Docker answers `Address already in
    /// use`; its API gives no code for it).
    pub fn is_address_in_use(&self) -> bool {
        self.engine().to_string().contains("Address already in use")
    }

    /// The engine's error (its message is what the kubelet shows, e.g. in
    /// `Failed to pull image "x": <engine message>`).
    pub fn engine(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        match self {
            Self::NotFound { source, .. }
            | Self::Conflict { source, .. }
            | Self::RegistryUnreachable { source, .. }
            | Self::Engine { source, .. } => source.as_ref(),
        }
    }
}
