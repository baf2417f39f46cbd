//! Edge networking (architecture.md §9; DESIGN §14): what lets pods on an edge node run an
//! application, not only a pod. Built into edgecore, where KubeEdge needs the separate EdgeMesh
//! project.
//!
//! The node's **pod network** ([`podnet`]), a bridge network of the container engine
//! on the Node's `spec.podCIDR` (kube-controller-manager's range allocator gives every Node
//! its own), so pod IPs are unique in the cluster; edged hands out the addresses
//! ([`ipam`]), so a pod keeps its IP for its life, with a sandbox or without.
//!
//! And the node's **Service proxy** ([`services`]): ClusterIP and NodePort Services
//! programmed with nftables from the Services and EndpointSlices edgecontroller sends (kept
//! in redb, so they work offline), endpoints the node does not reach directly through
//! cloudhub (the Service tunnel); and its **cluster DNS** ([`dns`]).
//!
//! # Layout
//! - [`podnet`]: [`PodNetwork`], the pod network of a node, and making it in the engine.
//! - [`ipam`]: [`PodIps`], the pod addresses on it, each the pod's for its life.
//! - [`services`]: [`ServiceProxy`] and its plan and rules.
//! - [`catalog`]: the node's Services and EndpointSlices, parsed once for both.
//! - [`site`]: routes to the pod networks of this node's site peers.
//! - [`dns`]: the cluster resolver (CoreDNS's `kubernetes` plugin semantics).
//! - [`resolv`]: resolv.conf files and the node's own.
//! - [`stored`]: reading the followed objects out of the store.
//! - [`config`]: the `network:` section of edgecore's configuration.
//! - [`error`](mod@error): [`Error`].

pub mod catalog;
pub mod config;
pub mod dns;
pub mod error;
pub mod ipam;
pub mod podnet;
pub mod resolv;
pub mod services;
pub mod site;
pub mod stored;

pub use config::NetworkConfig;
pub use error::{Error, Result};
pub use ipam::PodIps;
pub use podnet::PodNetwork;
pub use services::ServiceProxy;
