//! Edge networking (architecture.md §9; DESIGN §14): what lets pods on an edge node run an
//! application, not only a pod. Built into edgecore, where KubeEdge needs the separate EdgeMesh
//! project.
//!
//! So far: the node's **pod network** ([`podnet`]), a bridge network of the container engine
//! on the Node's `spec.podCIDR` (kube-controller-manager's range allocator gives every Node
//! its own), so pod IPs are unique in the cluster and a pod keeps its IP for the life of its
//! sandbox.
//!
//! # Layout
//! - [`podnet`]: [`PodNetwork`], the pod network of a node, and making it in the engine.
//! - [`error`](mod@error): [`Error`].

pub mod error;
pub mod podnet;

pub use error::{Error, Result};
pub use podnet::PodNetwork;
