//! The Service proxy of the node: ClusterIP and NodePort Services from the Services and
//! EndpointSlices in the store, programmed in the kernel with nftables the way kube-proxy's
//! nftables mode does (no userspace copy for endpoints the node reaches directly).
//!
//! - [`model`]: what the Services and EndpointSlices mean for this node (kube-proxy's
//!   semantics); pure.
//! - [`nft`]: the node's nftables table as an `nft -f` script; pure.
//! - [`proxy`]: [`ServiceProxy`], the task that applies it at every change.
//! - [`tunnel`]: the Service tunnel, carrying connections to endpoints the node does not
//!   reach directly over its cloudhub session.

pub mod model;
pub mod nft;
pub mod proxy;
pub mod tunnel;

pub use proxy::ServiceProxy;
