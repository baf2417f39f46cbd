//! Verge cloudhub: terminates one long-lived gRPC stream per edge node (`EdgeHub.Connect`),
//! authenticates it, and routes messages between edge sessions and the controllers attached
//! over `ControllerHub.Attach`. It follows KubeEdge's CloudHub, with gRPC instead of
//! websocket/QUIC, and holds no durable state: everything it forgets is rebuilt from the API
//! server and from the edges' inventories. The wire contract is `docs/protocol.md`.
//!
//! # Layout
//! - [`config`]: the YAML [`Config`] and its defaults.
//! - [`error`]: the crate's [`Error`] and its one mapping to `tonic::Status`.
//! - [`edge`]: the `EdgeHub` service: handshake, keepalive, upstream routing.
//! - [`controller`]: the `ControllerHub` service: snapshot, events, downstream routing.
//! - [`join`]: the `Join` service: bootstrap-token joins of new nodes.
//! - [`metrics`]: the Prometheus series (`/metrics` on the health endpoint).
//! - [`trust`]: identities: the Verge CA, TLS on every listener, joins and renewals through
//!   the CSR API, node identity, controller TokenReviews.
//! - `sessions`: the registry of node sessions and controllers (one lock, bounded queues).
//! - `delivery`: the pure per-node delivery queue: coalescing by object, acks, retries,
//!   bounds (at-least-once downstream, architecture.md §3.1 and §3.5).
//! - `session_queue`: the per-session task that drives a delivery queue on `tokio::time`.
//! - `routing`: pure rules for validating messages and rewriting resource paths.
//! - `stream`: the outbound half of a stream and how it ends.
//! - [`streams`]: kubectl logs/exec/attach/port-forward: the CONNECT listener for the API
//!   server's egress selector, node tunnels, forwarding between replicas.
//! - `fuzzing` (hidden): entry points of the pure rules for the fuzz targets in `fuzz/`.
//!
//! # Example
//! ```no_run
//! # async fn f(client: kube::Client) -> verge_cloudhub::Result<()> {
//! use std::sync::Arc;
//! use tokio_util::sync::CancellationToken;
//! use verge_cloudhub::trust::{KubeCluster, Trust};
//! let config = verge_cloudhub::Config::default();
//! let ca = verge_cloudhub::trust::load_or_create(&client, &config.trust).await?;
//! let trust = Trust::new(ca, Arc::new(KubeCluster::new(client)), config.trust.clone());
//! let hub = verge_cloudhub::CloudHub::new(config, Arc::new(trust))?;
//! hub.run(CancellationToken::new()).await
//! # }
//! ```

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod budget;
pub mod config;
pub mod controller;
mod delivery;
pub mod edge;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod join;
pub mod metrics;
mod routing;
mod session_queue;
mod sessions;
mod stream;
pub mod streams;
pub mod trust;

use std::future::Future;

use std::sync::Arc;
use trust::Trust;
use trust::tls::{self, ServerTls};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tonic::transport::Server;
use tracing::info;
use verge_proto::hub::controller_hub_server::ControllerHubServer;
use verge_proto::hub::edge_hub_server::EdgeHubServer;
use verge_proto::hub::join_server::JoinServer;
use verge_runtime::health::Health;

pub use config::{Config, LogFormat};
pub use controller::ControllerHubService;
pub use edge::EdgeHubService;
pub use error::{Error, Result};
pub use join::JoinService;
pub use routing::{SOURCE, validate_node_name};
pub use stream::FrameStream;

/// State shared by both services of one replica.
pub(crate) struct Shared {
    config: Config,
    trust: Arc<Trust>,
    registry: sessions::Registry,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// kubectl streams, when served ([`CloudHub::with_streams`]).
    streams: Option<Arc<streams::StreamsState>>,
}

impl Shared {
    /// Awaits the first frame of a stream, for at most [`Config::idle_timeout`].
    async fn first_frame<T>(
        &self,
        next: impl Future<Output = Result<Option<T>, Status>>,
    ) -> Result<T> {
        let idle = self.config.idle_timeout();
        tokio::select! {
            () = self.shutdown.cancelled() => Err(Error::ShuttingDown),
            next = tokio::time::timeout(idle, next) => match next {
                Err(_elapsed) => Err(Error::Timeout(idle)),
                Ok(Err(status)) => Err(Error::from_inbound(status)),
                Ok(Ok(None)) => Err(Error::UnexpectedFrame("stream closed before the hello")),
                Ok(Ok(Some(frame))) => Ok(frame),
            },
        }
    }
}

/// One cloudhub replica: the `EdgeHub` server for edges and the `ControllerHub` server for
/// controllers, sharing one session registry.
#[derive(Debug)]
pub struct CloudHub {
    config: Config,
    trust: Arc<Trust>,
    health: Option<Health>,
    streams: Option<streams::Streams>,
}

impl CloudHub {
    /// A replica with `config`, deciding identities with `trust`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when a value is out of range.
    pub fn new(config: Config, trust: Arc<Trust>) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            trust,
            health: None,
            streams: None,
        })
    }

    /// Reports readiness through `health` (the probe endpoint, `verge_runtime::health`):
    /// ready once the three servers are set up on bound listeners (the CA is loaded before
    /// a `CloudHub` exists), not ready once they stop.
    #[must_use]
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = Some(health);
        self
    }

    /// Serves kubectl streams (when `streams.enabled`): the CONNECT listener on
    /// [`Listeners::streams`], node tunnels and serving certificates, calling the API server
    /// through `streams`.
    #[must_use]
    pub fn with_streams(mut self, streams: streams::Streams) -> Self {
        self.streams = Some(streams);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Binds [`Config::edge_addr`], [`Config::controller_addr`] and [`Config::join_addr`]
    /// and serves until `shutdown` is cancelled, as [`CloudHub::serve_with_listeners`].
    ///
    /// # Errors
    /// [`Error::Bind`] if an address cannot be bound, else as `serve_with_listeners`.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let bind =
            |addr| async move { listen(addr).map_err(|source| Error::Bind { addr, source }) };
        let listeners = Listeners {
            edge: bind(self.config.edge_addr).await?,
            controllers: bind(self.config.controller_addr).await?,
            join: bind(self.config.join_addr).await?,
            streams: if self.streams.is_some() && self.config.streams.enabled {
                Some(bind(self.config.streams.addr).await?)
            } else {
                None
            },
        };
        self.serve_with_listeners(listeners, shutdown).await
    }

    /// Serves edges (mutual TLS), controllers and joins (TLS) on `listeners` (already bound,
    /// e.g. to `127.0.0.1:0` in tests, which read the ports with `TcpListener::local_addr`
    /// first).
    ///
    /// On cancellation of `shutdown` every stream ends (`UNAVAILABLE`, "cloudhub is shutting
    /// down", so edges reconnect elsewhere), and this returns once both servers and all
    /// session tasks have finished. Wrap it in a timeout for a bounded grace period.
    ///
    /// # Errors
    /// [`Error::Serve`] if a server fails; the other one is then stopped too.
    pub async fn serve_with_listeners(
        self,
        listeners: Listeners,
        shutdown: CancellationToken,
    ) -> Result<()> {
        let max = self.config.max_frame_bytes;
        let replica = self.config.effective_replica_name();
        info!(
            replica = %replica,
            edge_addr = %local_addr(&listeners.edge),
            controller_addr = %local_addr(&listeners.controllers),
            join_addr = %local_addr(&listeners.join),
            "cloudhub serving"
        );
        // Any server stopping (on shutdown or on failure) stops the others.
        let stop = shutdown.child_token();
        let tls = ServerTls::new(self.trust.ca(), &self.config.trust)?;
        let trust_config = self.config.trust.clone();
        let streams = match (&self.streams, &listeners.streams) {
            (Some(streams), Some(listener)) if self.config.streams.enabled => {
                Some(streams::StreamsState::new(
                    streams,
                    self.config.streams.clone(),
                    &self.trust,
                    &tls,
                    replica.clone(),
                    listener,
                )?)
            }
            _ => None,
        };
        let shared = Arc::new(Shared {
            config: self.config,
            trust: self.trust.clone(),
            registry: sessions::Registry::new(replica),
            tracker: TaskTracker::new(),
            shutdown: stop.clone(),
            streams: streams.as_ref().map(|(state, _)| state.clone()),
        });
        if let (Some((state, server)), Some(listener)) = (streams, listeners.streams) {
            shared.tracker.spawn(streams::serve(
                listener,
                server,
                shared.clone(),
                state,
                stop.clone(),
            ));
        }
        shared
            .tracker
            .spawn(tls.clone().rotate(self.trust.clone(), stop.clone()));
        shared
            .tracker
            .spawn(end_sessions_of_removed_nodes(shared.clone(), stop.clone()));
        let incoming = |listener, config, name| {
            tls::incoming(listener, config, &trust_config, name, stop.clone())
        };
        let edge = incoming(listeners.edge, tls.mutual(), "edge");
        let controllers = incoming(listeners.controllers, tls.server_only(), "controller");
        let join = incoming(listeners.join, tls.server_only(), "join");
        let edge_service = EdgeHubServer::new(EdgeHubService::new(shared.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let controller_service =
            ControllerHubServer::new(ControllerHubService::new(shared.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max);
        let edge_server = async {
            // Edgecore's windows (`verge_proto::transport::STREAM_WINDOW`): tunnels (kubectl
            // logs, cp) carry bulk data from the edge, which HTTP/2's 64 KiB default would
            // hold to 64 KiB per round trip; fixed, since adaptive windows ping at every
            // keepalive.
            let result = Server::builder()
                .initial_stream_window_size(Some(verge_proto::transport::STREAM_WINDOW))
                .initial_connection_window_size(Some(verge_proto::transport::CONNECTION_WINDOW))
                .add_service(edge_service)
                .serve_with_incoming_shutdown(edge, stop.clone().cancelled_owned())
                .await
                .map_err(|source| Error::Serve {
                    server: "edge",
                    source,
                });
            stop.cancel();
            result
        };
        // Controllers send no application keepalives: HTTP/2 pings detect a dead one.
        let interval = shared.config.keepalive_interval;
        let controller_server = async {
            let result = Server::builder()
                .http2_keepalive_interval(Some(interval))
                .http2_keepalive_timeout(Some(interval))
                .add_service(controller_service)
                .serve_with_incoming_shutdown(controllers, stop.clone().cancelled_owned())
                .await
                .map_err(|source| Error::Serve {
                    server: "controller",
                    source,
                });
            stop.cancel();
            result
        };
        let join_service = JoinServer::new(JoinService::new(self.trust.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let join_server = async {
            let result = Server::builder()
                .add_service(join_service)
                .serve_with_incoming_shutdown(join, stop.clone().cancelled_owned())
                .await
                .map_err(|source| Error::Serve {
                    server: "join",
                    source,
                });
            stop.cancel();
            result
        };
        if let Some(health) = self.health {
            health.set_ready(true).await;
            let stopped = stop.clone();
            shared.tracker.spawn(async move {
                stopped.cancelled().await;
                health.set_ready(false).await;
            });
        }
        let (edge_result, controller_result, join_result) =
            tokio::join!(edge_server, controller_server, join_server);
        shared.tracker.close();
        shared.tracker.wait().await;
        info!("cloudhub stopped");
        edge_result.and(controller_result).and(join_result)
    }
}

/// The three bound listeners of a replica.
#[derive(Debug)]
pub struct Listeners {
    /// EdgeHub (mutual TLS).
    pub edge: TcpListener,
    /// ControllerHub (TLS, service-account tokens).
    pub controllers: TcpListener,
    /// Join (TLS, bootstrap tokens).
    pub join: TcpListener,
    /// The streams CONNECT listener (mutual TLS), used with [`CloudHub::with_streams`].
    pub streams: Option<TcpListener>,
}

/// A listener's address for logs.
fn local_addr(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string())
}

/// The accept queue asked for on every listener; the kernel caps it at `net.core.somaxconn`
/// (4096 on current Linux). tokio's `TcpListener::bind` asks for 1024, which a reconnect
/// storm of thousands of edges overflows: each SYN dropped then costs its edge a TCP
/// retransmission (1 s, then 3, 7, 15, 31 s after the first).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` (`SO_REUSEADDR`, as tokio's `bind`) with [`LISTEN_BACKLOG`].
///
/// # Errors
/// The socket cannot be created, bound or put to listen.
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Ends the session of every edge Node deleted (or stripped of the edge label) while cloudhub
/// runs, within the watch's delay: a deleted Node's certificate stops working at once for
/// an open session as for a new one ([`trust::Trust::check_edge_node`]).
async fn end_sessions_of_removed_nodes(shared: Arc<Shared>, stop: CancellationToken) {
    use futures::StreamExt as _;
    let mut removed = shared.trust.removed_edge_nodes();
    loop {
        let node = tokio::select! {
            () = stop.cancelled() => return,
            node = removed.next() => node,
        };
        let Some(node) = node else { return };
        shared.registry.end_node(&node, Error::NodeRemoved);
    }
}
