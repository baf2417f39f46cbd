//! The streaming server: answers cloudhub's tunnel requests ([`TunnelRequest`]) by opening
//! `EdgeHub.Tunnel`, terminating TLS on it with the node's kubelet serving certificate,
//! accepting only the API server's kubelet client certificate (issued by the CA and with a
//! name from the session's `Welcome.kubelet_clients`), and serving the kubelet's paths: the
//! streaming ones and the read ones (`read_api`).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::{Instrument as _, debug, warn};
use verge_pki::{CertInfo, ReloadableServerCert};
use verge_proto::hub::{KubeletClients, TunnelFrame, TunnelOpen, tunnel_frame};

use super::commands;
use super::containers::Containers;
use super::logs;
use super::read_api::{self, ServedMetrics};
use verge_container_runtime::{DockerRuntime, StreamingRuntime};
use verge_edge_metrics::{CgroupFs, Collector};
use verge_edgehub::certificates::serving::ServingCert;

/// How long one call of the streaming server's Docker client may last (a followed log, an
/// exec or an attach): the kubelet's default `streamingConnectionIdleTimeout`.
const DOCKER_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4 * 3600);

/// Bytes buffered between the tunnel and the TLS server, each way.
const PIPE_BYTES: usize = 256 * 1024;
/// Tunnel requests waiting for the server.
const REQUESTS: usize = 64;

pub use verge_edgehub::tunnel::{TunnelRequest, TunnelRequests};

/// The streaming server; see the module docs. Its container runtime (Docker's in
/// production, [`DockerRuntime`](verge_container_runtime::DockerRuntime)) is given to
/// [`run`](Self::run), so tunnel requests queue (up to 64) while the runtime is not reachable
/// yet.
pub struct StreamingServer {
    store: verge_edge_store::MetaStore,
    node: String,
    pods_dir: std::path::PathBuf,
    serving: ServingCert,
    requests: mpsc::Receiver<TunnelRequest>,
    metrics: ServedMetrics,
}

impl StreamingServer {
    /// A server for the containers of node `node`, its pods read from `store`, its serving
    /// certificate kept under `data_dir`; and the sender edgehub hands requests to.
    pub fn new(
        store: verge_edge_store::MetaStore,
        node: &str,
        data_dir: &std::path::Path,
    ) -> (Self, TunnelRequests) {
        let (tx, requests) = mpsc::channel(REQUESTS);
        (
            Self {
                store,
                node: node.to_owned(),
                pods_dir: data_dir.join("pods"),
                serving: ServingCert::kubelet(data_dir, node),
                requests,
                metrics: ServedMetrics::default(),
            },
            tx,
        )
    }

    /// The same server with `metrics` behind `/metrics` and `/metrics/probes` (empty
    /// registries otherwise).
    #[must_use]
    pub fn with_metrics(mut self, metrics: ServedMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Serves tunnel requests on Docker at `endpoint` (edged's `containerRuntimeEndpoint`;
    /// `None`: the local socket or `DOCKER_HOST`) for the containers of node `node`, until
    /// `shutdown`. The Docker client is the server's own, whose calls may last 4 hours
    /// (edged's time out after 2 minutes; the kubelet's `streamingConnectionIdleTimeout`),
    /// since a followed log or an exec lasts as long as the client wants. While the endpoint
    /// cannot be used (Docker's socket is not there yet, e.g. edgecore started before
    /// dockerd), it tries again every 5 s, as edged does, and tunnel requests wait.
    pub async fn run_on_docker(
        self,
        endpoint: Option<&str>,
        node: &str,
        shutdown: CancellationToken,
    ) {
        let connect = || async { DockerRuntime::with_timeout(endpoint, node, DOCKER_CALL_TIMEOUT) };
        let cancelled = shutdown.cancelled();
        let what = "streaming: container runtime";
        let Some(runtime) =
            verge_container_runtime::connect_retrying(what, cancelled, connect).await
        else {
            return;
        };
        self.run(runtime, shutdown).await;
    }

    /// Serves tunnel requests on `runtime` (scoped to this node) until `shutdown`; failures
    /// of single tunnels are logged. The runtime's calls should have no short timeout: a
    /// followed log or an exec lasts as long as the client wants.
    pub async fn run<R: StreamingRuntime>(mut self, runtime: R, shutdown: CancellationToken) {
        let runtime = runtime.prepared().await;
        let collector = Collector::new(runtime.clone(), CgroupFs::host(), &self.node)
            .with_pods_dir(self.pods_dir.clone());
        let read = read_api::routes(collector, self.store.clone(), self.metrics);
        let router = router(Containers::new(runtime, self.store)).merge(read);
        loop {
            let request = tokio::select! {
                () = shutdown.cancelled() => return,
                request = self.requests.recv() => match request {
                    Some(request) => request,
                    None => return,
                },
            };
            let span = verge_telemetry::span!("edgecore.tunnel", verge.tunnel.id = %request.id);
            let (serving, router) = (self.serving.clone(), router.clone());
            verge_runtime::tasks::spawn(
                "tunnel",
                async move {
                    if let Err(error) = tunnel(request, serving, router).await {
                        warn!(%error, "tunnel failed");
                    }
                }
                .instrument(span),
            );
        }
    }
}

/// The kubelet paths served on every tunnel.
pub(super) fn router<R: StreamingRuntime>(containers: Containers<R>) -> Router {
    Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs::<R>),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(commands::exec::<R>).post(commands::exec::<R>),
        )
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(commands::exec::<R>).post(commands::exec::<R>),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(commands::attach::<R>).post(commands::attach::<R>),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(commands::attach::<R>).post(commands::attach::<R>),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(commands::port_forward::<R>).post(commands::port_forward::<R>),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(commands::port_forward::<R>).post(commands::port_forward::<R>),
        )
        .with_state(containers)
}

/// Why one tunnel failed.
#[derive(Debug, thiserror::Error)]
enum TunnelError {
    #[error("no kubelet client CA from cloudhub (streams.kubeletClientCaFile): refusing")]
    NoClients,
    #[error(transparent)]
    Serving(#[from] verge_edgehub::certificates::serving::ServingError),
    #[error("TLS set-up: {0}")]
    Tls(#[from] verge_pki::Error),
    #[error("cloudhub refused the tunnel: {}", .0.message())]
    Open(#[from] tonic::Status),
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
    #[error("client certificate {0:?} is not an allowed kubelet client")]
    Forbidden(Option<String>),
}

async fn tunnel(
    mut request: TunnelRequest,
    serving: ServingCert,
    router: Router,
) -> Result<(), TunnelError> {
    let clients = request.clients.take().ok_or(TunnelError::NoClients)?;
    let key = serving.get(&mut request.client).await?;
    let config = tls_config(key, &clients)?;
    let (frames, outbound) = verge_proto::tunnel::outbound(TunnelFrame {
        frame: Some(tunnel_frame::Frame::Open(TunnelOpen {
            tunnel_id: request.id.clone(),
        })),
    });
    let inbound = request.client.tunnel(outbound).await?.into_inner();
    let (near, far) = tokio::io::duplex(PIPE_BYTES);
    verge_runtime::tasks::spawn("tunnel splice", async move {
        match verge_proto::tunnel::splice(near, inbound, frames).await {
            Ok(spliced) => debug!(?spliced, "tunnel closed"),
            Err(error) => debug!(%error, "tunnel ended"),
        }
    });
    let tls = TlsAcceptor::from(config)
        .accept(far)
        .await
        .map_err(TunnelError::Handshake)?;
    let name = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| CertInfo::parse_der(leaf).ok())
        .and_then(|info| info.common_name().map(str::to_owned));
    if !name.as_ref().is_some_and(|n| clients.names.contains(n)) {
        return Err(TunnelError::Forbidden(name));
    }
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades()
        .await
    {
        debug!(%error, "kubelet API connection ended");
    }
    Ok(())
}

/// TLS with `key`, requiring a client certificate from `clients`' CAs; HTTP/1.1 only (the
/// API server upgrades kubelet connections for exec, attach and port-forward).
fn tls_config(
    key: Arc<rustls::sign::CertifiedKey>,
    clients: &KubeletClients,
) -> Result<Arc<ServerConfig>, verge_pki::Error> {
    let cas = verge_pki::pem_io::certs_from_pem(&clients.ca_certificates)?;
    let mut config =
        verge_pki::server_config(Arc::new(ReloadableServerCert::new(key)), &cas, true)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
