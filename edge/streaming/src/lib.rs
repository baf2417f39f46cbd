//! The streaming server: the kubelet's streaming API for the pods on this node (`kubectl logs`, `exec`, `attach`,
//! `port-forward`, `cp`) and its read endpoints (resource metrics, stats summary, pods, health), served to the API
//! server and metrics-server through cloudhub (architecture.md §10).
//!
//! The API server reaches a node's kubelet endpoint over HTTPS; for an edge node its
//! egress selector sends that connection as an HTTP `CONNECT` to cloudhub, which carries
//! the bytes over the node's own gRPC session (`EdgeHub.Tunnel`) to edgecore. edgecore
//! terminates TLS itself (its serving certificate, verified by the API server's
//! `--kubelet-certificate-authority`; the API server's client certificate verified here)
//! and serves the kubelet's paths on that connection, so the API server talks to edgecore
//! exactly as it talks to a kubelet.
//!
//! # Layout
//! - `spdy/`: SPDY/3.1 framing and sessions, server side (what the API server speaks to a
//!   kubelet for exec, attach and port-forward).
//! - `remotecommand/`: exec and attach (`channel.k8s.io` protocols v2–v5) on the runtime.
//! - `portforward.rs`: `portforward.k8s.io`, connections into the pod's network namespace.
//! - `upgrade.rs`: the HTTP/1.1 upgrade handshake (protocol negotiation, 400/403/101).
//! - `netns.rs`: TCP connections from inside a pod's network namespace (`setns`).
//! - `handlers.rs`: the axum handlers of the upgrade paths: [`exec`], [`attach`],
//!   [`port_forward`].
//! - `commands.rs`: the exec, attach and port-forward routes, resolved to containers.
//! - `server.rs`: [`StreamingServer`]: tunnels from cloudhub, TLS, the kubelet's routes.
//! - the node's kubelet serving certificate is `verge_edgehub::certificates::serving`'s.
//! - `containers.rs`: which pod and runtime container a request means.
//! - `logs.rs`: `/containerLogs`.
//! - `read_api.rs`: the read endpoints (`/healthz`, `/pods`, `/metrics/resource`,
//!   `/stats/summary`, `/metrics`, `/metrics/probes`) for the node proxy and metrics-server,
//!   with [`ServedMetrics`]; figures from `verge-edge-metrics`.
//! - `error.rs`: [`StreamError`], with the kubelet's statuses and texts.
//! - `config.rs`: the `streaming:` section of edgecore's configuration ([`StreamingConfig`]).
//!
//! Every container call goes through the runtime's
//! [`StreamingRuntime`](verge_container_runtime::StreamingRuntime) (with
//! [`ContainerRuntime`](verge_container_runtime::ContainerRuntime) to list a pod's containers):
//! the server is generic over it, Docker's in production, the fake in unit tests.
//!
//! The crate builds on the container runtime (`verge-container-runtime`), edgehub
//! (`verge-edgehub`, whose session hands over [`TunnelRequest`]s) and the edge store (the
//! node's pods); no other edge crate imports it but edgecore, which wires it.

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod commands;
mod config;
mod containers;
mod error;
pub mod handlers;
mod logs;
pub mod netns;
pub mod portforward;
mod read_api;
pub mod remotecommand;
mod server;
pub mod spdy;
pub mod upgrade;

#[cfg(test)]
mod tests;

pub use config::StreamingConfig;
pub use error::StreamError;
pub use handlers::{attach, exec, port_forward};
pub use read_api::ServedMetrics;
pub use server::{StreamingServer, TunnelRequest, TunnelRequests};
pub use verge_edgehub::certificates::serving::ServingError;
