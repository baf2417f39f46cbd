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
    /// `nft` could not be run or refused the Service proxy's rules.
    #[error("nftables: {reason}")]
    Nft {
        /// What went wrong (with `nft`'s message).
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

impl Error {
    /// Whether this is an nftables failure.
    pub fn is_nft(&self) -> bool {
        matches!(self, Self::Nft { .. })
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
