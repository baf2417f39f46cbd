//! The crate's error type.

/// What edge networking fails with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Node's `spec.podCIDR` is not an IPv4 network this node can use.
    #[error("pod CIDR {cidr:?} of node {node}: {reason}")]
    PodCidr {
        /// The node.
        node: String,
        /// The CIDR as given.
        cidr: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The container engine refused the pod network.
    #[error("pod network {network}")]
    Runtime {
        /// The network's name.
        network: String,
        /// The engine's error.
        #[source]
        source: verge_container_runtime::RuntimeError,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
