//! The Service proxy of the node: ClusterIP and NodePort Services from the Services and
//! EndpointSlices in the store, programmed in the kernel with nftables the way kube-proxy's
//! nftables mode does (no userspace copy for endpoints the node reaches directly).
//!
//! - [`model`]: what the Services and EndpointSlices mean for this node (kube-proxy's
//!   semantics); pure.
//! - [`nft`]: the node's nftables table as an `nft -f` script; pure.
//! - [`proxy`]: [`ServiceProxy`], the task that applies it at every change.

pub mod model;
pub mod nft;
pub mod proxy;

pub use proxy::ServiceProxy;
