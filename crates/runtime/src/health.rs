//! The health endpoint of a cloud service (feature `health`): plaintext gRPC
//! `grpc.health.v1.Health` for Kubernetes gRPC probes, and HTTP `/healthz` and `/readyz` on
//! the same port, so one small listener serves every probe (and, later, `/metrics`).
//!
//! The services' own ports are (m)TLS, which the kubelet's gRPC probe does not speak, so the
//! probes get a port of their own (each service's `healthAddr`). What it answers:
//!
//! | probe | gRPC `service` | HTTP | answer |
//! |---|---|---|---|
//! | readiness | `""` (the server as a whole) | `GET /readyz` | SERVING / 200 once [`Health::set_ready`] said so, NOT_SERVING / 503 before and from the start of shutdown |
//! | liveness | [`LIVENESS_SERVICE`] | `GET /healthz` | SERVING / 200 while the process answers at all |
//!
//! Liveness stays SERVING while the process drains, so the kubelet does not kill a pod that
//! is shutting down in good order; readiness drops first, so endpoints stop routing to it.
//! The endpoint reveals nothing but these statuses (no authentication, like the kubelet's
//! own `/healthz`); bind it to the pod's address only if that matters.
//!
//! [`serve_with_health`](crate::serve_with_health) runs a component with its endpoint under
//! the one shutdown story of [`serve`](crate::serve).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::{HealthReporter, HealthService};
use tracing::info;

/// What [`HealthEndpoint::route`] takes, re-exported so that callers need no axum
/// dependency of their own: `route("/metrics", get(handler))`.
pub use axum::routing::{MethodRouter, get};

/// The gRPC health service name of the liveness status (Kubernetes: `livenessProbe: {grpc:
/// {port: <health port>, service: liveness}}`). The readiness status is the server's overall
/// status, the empty name (a probe without `service`).
pub const LIVENESS_SERVICE: &str = "liveness";

/// Errors of the health endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The address cannot be bound (in use, not local, no permission).
    #[error("cannot bind the health endpoint to {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("the health endpoint failed")]
    Serve(#[source] tonic::transport::Error),
}

/// The health statuses of one process: a cheap handle, cloned into whatever decides
/// readiness. Starts not ready and alive.
#[derive(Debug, Clone)]
pub struct Health {
    reporter: HealthReporter,
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Not ready, alive.
    fn new() -> Self {
        Self {
            reporter: HealthReporter::new(),
            ready: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Sets the readiness status (gRPC service `""`, HTTP `/readyz`); watchers of the gRPC
    /// status are notified of a change.
    pub async fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
        let status = if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status("", status).await;
    }

    /// Sets the status of a further gRPC health service `name` (e.g. a controller's `leader`,
    /// for people and tests; Kubernetes probes use `""` and [`LIVENESS_SERVICE`]).
    pub async fn set_service(&self, name: &str, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status(name, status).await;
    }

    /// Whether the process reports itself ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Both statuses at their initial values: readiness NOT_SERVING, liveness SERVING.
    async fn register(&self) {
        self.set_ready(false).await;
        self.reporter
            .set_service_status(LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
    }
}

/// A bound health endpoint, not yet serving: bind early (a taken port fails start-up),
/// hand [`HealthEndpoint::health`] to the component, then [`HealthEndpoint::serve`].
#[derive(Debug)]
pub struct HealthEndpoint {
    listener: TcpListener,
    addr: SocketAddr,
    health: Health,
    router: axum::Router,
}

impl HealthEndpoint {
    /// Binds `addr` (port 0 picks a free port, see [`HealthEndpoint::local_addr`]).
    ///
    /// # Errors
    /// [`HealthError::Bind`].
    pub async fn bind(addr: SocketAddr) -> Result<Self, HealthError> {
        let bind_error = |source| HealthError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let health = Health::new();
        health.register().await;
        let ready = health.ready.clone();
        let router = Routes::new(tonic_health::pb::health_server::HealthServer::new(
            HealthService::from_health_reporter(health.reporter.clone()),
        ))
        .into_axum_router()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.load(Ordering::SeqCst);
                async move {
                    if ready {
                        (StatusCode::OK, "ok\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        );
        Ok(Self {
            listener,
            addr: local,
            health,
            router,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The handle that sets this endpoint's statuses.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Adds an HTTP route on the same port (e.g. `/metrics`).
    #[must_use]
    pub fn route(mut self, path: &str, handler: MethodRouter) -> Self {
        self.router = self.router.route(path, handler);
        self
    }

    /// Serves gRPC (HTTP/2 without TLS, as the kubelet's gRPC probe speaks it) and HTTP/1.1
    /// until `stop` is cancelled.
    ///
    /// # Errors
    /// [`HealthError::Serve`] when the server fails.
    pub async fn serve(self, stop: CancellationToken) -> Result<(), HealthError> {
        info!(addr = %self.addr, "health endpoint serving");
        tonic::transport::Server::builder()
            .accept_http1(true)
            .add_routes(Routes::from(self.router))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(self.listener),
                stop.cancelled_owned(),
            )
            .await
            .map_err(HealthError::Serve)
    }
}
