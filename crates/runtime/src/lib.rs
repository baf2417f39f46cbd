//! One shutdown story for every Verge binary (cloudhub, edgecontroller, edgecore).
//!
//! A binary parses its flags, loads its configuration, installs telemetry, builds its
//! component and hands it to [`serve`]: the component runs until it fails or the process
//! gets SIGINT or SIGTERM; then its [`CancellationToken`] is cancelled and it gets the
//! configured grace period to drain (the way the kubelet gives a container
//! `terminationGracePeriodSeconds` between SIGTERM and SIGKILL). Inside a component,
//! [`Modules`] runs its long-lived parts and reports the first failure. Every error chain
//! is printed the same way, by [`ErrorChain`].
//!
//! # Layout
//!
//! * [`serve`] and [`Outcome`] — run until a signal, drain within the grace period, map the
//!   result to an exit code.
//! * [`signal`] — SIGINT/SIGTERM as a [`Signal`].
//! * [`Modules`] — a `JoinSet` of named modules; the first failure cancels the rest.
//! * [`tasks`] — the one way production code starts a task ([`tasks::spawn`]): tracked
//!   process-wide, and waited for by [`serve`] ([`tasks::drain`]) within the grace period.
//! * [`backoff`] — jittered exponential reconnect delays ([`backoff::Backoff`]), for every
//!   client that reconnects (edgehub to cloudhub, the eventbus and the apps bridge to the
//!   MQTT broker).
//! * [`ErrorChain`] — `outer: cause: root cause` for logs and the terminal.
//! * [`limits`] — the open-file limit a server raises for itself.
//! * [`budget`] — byte budgets bounding what a queue a peer feeds may hold.
//! * `kube_client` (feature `kube`) — the cloud services' Kubernetes client, and
//!   [`as_node`]: one that acts as a node (constrained impersonation).
//! * `health` (feature `health`) — the plaintext health endpoint of the cloud services
//!   (gRPC `grpc.health.v1` and HTTP `/healthz`, `/readyz`) for Kubernetes probes, and
//!   `serve_with_health`.
//! * `metrics` (feature `metrics`) — Prometheus metrics: the OpenMetrics text of a process's
//!   registry, its `/metrics` route on the health endpoint, and (with `kube`) the
//!   Kubernetes API request series of the client.
//! * `unix_grpc` (feature `unix-grpc`) — gRPC servers on unix sockets that accept the
//!   socket-path `:authority` of Go gRPC clients (KubeEdge mappers).

pub mod backoff;
pub mod budget;
mod chain;
#[cfg(feature = "health")]
pub mod health;
#[cfg(feature = "kube")]
mod kube_client;
pub mod limits;
#[cfg(feature = "metrics")]
pub mod metrics;
mod modules;
mod serve;
pub mod tasks;
#[cfg(feature = "unix-grpc")]
pub mod unix_grpc;

pub use chain::ErrorChain;
#[cfg(feature = "kube")]
pub use kube_client::{as_node, kube_client, node_user};
pub use modules::{ModuleError, Modules};
#[cfg(feature = "health")]
pub use serve::serve_with_health;
pub use serve::{Outcome, Signal, fail, serve, signal};
pub use tokio_util::sync::CancellationToken;
