//! The way to the real API server: one HTTP/2 connection, TLS verified with the cluster CA
//! (the stored `kube-root-ca.crt` ConfigMap's `ca.crt`, as `kubernetes.default.svc`),
//! carried over the node's cloudhub session by `EdgeHub.Dial` to a ready endpoint of the
//! `default/kubernetes` Service (cloudhub dials only such endpoints). Requests of every pod
//! share it, each with its own `Authorization`; it is made again when it closes or the
//! session changes.

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, Uri, header};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::{Mutex, watch};
use tracing::{debug, info};
use verge_core::ResourceType;
use verge_edge_net::catalog::Snapshot;
use verge_edge_store::MetaStore;
use verge_edgehub::SessionInfo;
use verge_proto::hub::{ServiceDial, TunnelFrame, tunnel_frame};

/// A request or response body as the edge API passes it on.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The namespace and name of the Service whose endpoints are the API server.
pub const SERVICE: (&str, &str) = ("default", "kubernetes");

/// The name the API server's certificate is verified for.
pub const SERVER_NAME: &str = "kubernetes.default.svc";

/// The ConfigMap every namespace holds with the cluster CA (`ca.crt`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// How long cloudhub may take to answer the dial and the API server the TLS handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Buffer of the in-memory pipe between the tunnel and TLS, in bytes.
const PIPE_BYTES: usize = 64 * 1024;

/// Why the API server cannot be reached now (the text names the cause).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// The connection to the API server; see the module docs.
#[derive(Debug)]
pub struct Upstream {
    store: MetaStore,
    sessions: watch::Receiver<Option<SessionInfo>>,
    catalog: watch::Receiver<Arc<Snapshot>>,
    conn: Mutex<Option<(u64, SendRequest<Body>)>>,
}

impl Upstream {
    /// The way to the API server over the sessions of `sessions` (edgehub's), to the
    /// endpoints `catalog` holds, with the cluster CA from `store`.
    pub fn new(
        store: MetaStore,
        sessions: watch::Receiver<Option<SessionInfo>>,
        catalog: watch::Receiver<Arc<Snapshot>>,
    ) -> Self {
        Self {
            store,
            sessions,
            catalog,
            conn: Mutex::new(None),
        }
    }

    /// The sessions it follows (edgehub's).
    pub fn sessions(&self) -> watch::Receiver<Option<SessionInfo>> {
        self.sessions.clone()
    }

    /// Whether a cloudhub session is up now.
    pub fn online(&self) -> bool {
        self.sessions.borrow().is_some()
    }

    /// Sends `request` (its path and query, method, headers and body, hop-by-hop headers
    /// left out) to the API server and returns its response head with the body streaming.
    ///
    /// # Errors
    /// [`Unreachable`] when there is no session, no ready endpoint, no cluster CA, the dial
    /// or handshake fails, or the connection fails before the response head.
    pub async fn send(&self, request: Request<Body>) -> Result<Response<Incoming>, Unreachable> {
        let mut sender = self.sender().await?;
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        parts.uri = Uri::try_from(format!("https://{SERVER_NAME}{path}"))
            .map_err(|e| Unreachable(format!("request path {path:?}: {e}")))?;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::HOST);
        parts.version = http::Version::HTTP_2;
        if sender.ready().await.is_err() {
            // The kept connection closed while idle (the API server or the tunnel ended
            // it): make a new one once before calling the API server unreachable.
            self.forget_connection().await;
            sender = self.sender().await?;
            sender.ready().await.map_err(|e| {
                Unreachable(format!("the connection to the API server closed: {e}"))
            })?;
        }
        sender
            .send_request(Request::from_parts(parts, body))
            .await
            .map_err(|e| Unreachable(format!("the API server did not answer: {e}")))
    }

    /// Drops the kept connection, so the next [`Upstream::sender`] makes a new one.
    async fn forget_connection(&self) {
        *self.conn.lock().await = None;
    }

    /// The open connection for the current session, made if there is none.
    async fn sender(&self) -> Result<SendRequest<Body>, Unreachable> {
        let session = self
            .sessions
            .borrow()
            .clone()
            .ok_or_else(|| Unreachable("no cloudhub session".into()))?;
        let mut conn = self.conn.lock().await;
        if let Some((generation, sender)) = conn.as_ref()
            && *generation == session.generation
            && !sender.is_closed()
        {
            return Ok(sender.clone());
        }
        *conn = None;
        let generation = session.generation;
        let sender = tokio::time::timeout(CONNECT_TIMEOUT, self.connect(session))
            .await
            .map_err(|_| {
                Unreachable(format!(
                    "no connection to the API server within {CONNECT_TIMEOUT:?}"
                ))
            })??;
        *conn = Some((generation, sender.clone()));
        Ok(sender)
    }

    /// Dials the API server over `session` and speaks TLS and HTTP/2 to it.
    async fn connect(&self, mut session: SessionInfo) -> Result<SendRequest<Body>, Unreachable> {
        let endpoint = api_endpoint(&self.catalog.borrow())
            .ok_or_else(|| Unreachable("the kubernetes Service has no ready endpoint".into()))?;
        let ca = cluster_ca(&self.store).ok_or_else(|| {
            Unreachable(format!(
                "no {ROOT_CA_CONFIGMAP} ConfigMap with ca.crt is stored"
            ))
        })?;
        let tls = verge_pki::client_config(&ca, None)
            .map_err(|e| Unreachable(format!("the cluster CA of {ROOT_CA_CONFIGMAP}: {e}")))?;
        let (frames, outbound) = verge_proto::tunnel::outbound(TunnelFrame {
            frame: Some(tunnel_frame::Frame::Dial(ServiceDial {
                namespace: SERVICE.0.to_owned(),
                service: SERVICE.1.to_owned(),
                address: endpoint.ip().to_string(),
                port: u32::from(endpoint.port()),
            })),
        });
        let inbound = session
            .client
            .dial(outbound)
            .await
            .map_err(|s| Unreachable(format!("cloudhub did not dial {endpoint}: {}", s.message())))?
            .into_inner();
        let (near, far) = tokio::io::duplex(PIPE_BYTES);
        verge_runtime::tasks::spawn("edge api upstream tunnel", async move {
            match verge_proto::tunnel::splice(far, inbound, frames).await {
                Ok(spliced) => debug!(?spliced, "edge API: upstream tunnel closed"),
                Err(error) => debug!(%error, "edge API: upstream tunnel ended"),
            }
        });
        let name = rustls::pki_types::ServerName::try_from(SERVER_NAME)
            .map_err(|e| Unreachable(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(name, near)
            .await
            .map_err(|e| Unreachable(format!("TLS with the API server at {endpoint}: {e}")))?;
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| Unreachable(format!("HTTP/2 with the API server: {e}")))?;
        verge_runtime::tasks::spawn("edge api upstream", async move {
            if let Err(error) = connection.await {
                debug!(%error, "edge API: connection to the API server ended");
            }
        });
        info!(%endpoint, "edge API: connected to the API server through cloudhub");
        Ok(sender)
    }
}

/// A ready endpoint of the `default/kubernetes` Service's HTTPS port (the port named
/// `https`, else its first TCP port), from its EndpointSlices.
pub fn api_endpoint(snapshot: &Snapshot) -> Option<SocketAddrV4> {
    snapshot
        .slices()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(SERVICE.0)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    .is_some_and(|n| n == SERVICE.1)
        })
        .find_map(|slice| {
            let ports = slice.ports.as_deref().unwrap_or_default();
            let port = ports
                .iter()
                .find(|p| p.name.as_deref() == Some("https"))
                .or_else(|| {
                    ports
                        .iter()
                        .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
                })
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())?;
            let ip = slice
                .endpoints
                .as_deref()
                .unwrap_or_default()
                .iter()
                .filter(|e| e.conditions.and_then(|c| c.ready) != Some(false))
                .find_map(|e| e.addresses.first().copied())?;
            Some(SocketAddrV4::new(ip, port))
        })
}

/// The cluster CA: `ca.crt` of a stored `kube-root-ca.crt` ConfigMap (every namespace's
/// holds the same).
///
/// Only those ConfigMaps are decoded: the edge API looks the CA up every minute (its serving
/// certificate must chain to it) and a node may hold thousands of ConfigMaps.
pub fn cluster_ca(store: &MetaStore) -> Option<String> {
    let rows = store
        .list(ResourceType::ConfigMap)
        .inspect_err(
            |e| tracing::warn!(error = %verge_runtime::ErrorChain(e), "listing the store failed"),
        )
        .ok()?;
    rows.into_iter()
        .filter(|(key, _)| key.name == ROOT_CA_CONFIGMAP)
        .find_map(|(key, stored)| {
            verge_edge_net::stored::parse::<ConfigMap>(&key, &stored.content)?
                .data?
                .remove("ca.crt")
        })
}

/// Removes the hop-by-hop headers (RFC 9110 §7.6.1) and those `Connection` names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
}
