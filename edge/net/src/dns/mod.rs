//! Cluster DNS on the edge node (work in progress): the names of the zone as CoreDNS's
//! `kubernetes` plugin answers them ([`names`]), from the Services and EndpointSlices in the
//! store, so they resolve offline.
//!
//! - [`names`]: [`names::ClusterNames`]; pure.
//! - [`server`]: the UDP and TCP servers answering the zone and relaying the rest.
//! - [`task`]: [`ClusterDns`], the task that keeps the zone and serves it on the gateway.

pub mod names;
pub mod server;
pub mod task;

pub use task::ClusterDns;
