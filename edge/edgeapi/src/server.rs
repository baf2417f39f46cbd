//! The edge API's task: waits until the node knows the `kubernetes` Service's cluster IP,
//! loads or asks for its serving certificate ([`crate::trust`]); then, once the node's pod
//! network's gateway is known, serves HTTPS
//! (HTTP/2 and HTTP/1.1) on the gateway at the configured port, bound with `IP_FREEBIND` like
//! the Service tunnel. Each request is answered by [`Handler`]: through [`Upstream`] online,
//! from [`ApiCache`] offline.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_edge_net::catalog::Snapshot;
use verge_edge_store::MetaStore;
use verge_edgehub::SessionInfo;
use verge_pki::ReloadableServerCert;

use crate::cache::ApiCache;
use crate::handler::Handler;
use crate::upstream::{self, Upstream};
use crate::{EdgeApiConfig, trust};

/// How often the task looks again for the gateway and the cluster IP while either is unknown.
pub const WAIT_INTERVAL: Duration = Duration::from_secs(1);

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The edge API of one node; see the crate docs.
#[derive(Debug)]
pub struct EdgeApi {
    store: MetaStore,
    node: String,
    domain: String,
    config: EdgeApiConfig,
    dir: PathBuf,
    catalog: watch::Receiver<Arc<Snapshot>>,
    upstream: Arc<Upstream>,
    sessions: watch::Receiver<Option<SessionInfo>>,
}

impl EdgeApi {
    /// The edge API of node `node` (cluster domain `domain`) as `config` says, keeping its
    /// serving certificate and cache in `dir`; the Services and EndpointSlices from
    /// `catalog`, the link from `sessions`.
    pub fn new(
        store: MetaStore,
        node: &str,
        domain: &str,
        config: &EdgeApiConfig,
        dir: PathBuf,
        catalog: watch::Receiver<Arc<Snapshot>>,
        sessions: watch::Receiver<Option<SessionInfo>>,
    ) -> Self {
        let upstream = Arc::new(Upstream::new(
            store.clone(),
            sessions.clone(),
            catalog.clone(),
        ));
        Self {
            store,
            node: node.to_owned(),
            domain: domain.to_owned(),
            config: config.clone(),
            dir,
            catalog,
            upstream,
            sessions,
        }
    }

    /// The `kubernetes` Service's cluster IP, once stored.
    fn cluster_ip(&self) -> Option<Ipv4Addr> {
        self.catalog
            .borrow()
            .services()
            .find(|s| {
                s.metadata.namespace.as_deref() == Some(upstream::SERVICE.0)
                    && s.metadata.name.as_deref() == Some(upstream::SERVICE.1)
            })
            .and_then(|s| s.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok())
    }

    /// The pod network's gateway, once the node's Node with its pod CIDR is stored.
    fn gateway(&self) -> Option<Ipv4Addr> {
        let network = verge_edge_net::stored::pod_network(&self.store, &self.node)?;
        network.spec().gateway.parse().ok()
    }

    /// Serves until `stop` (see the module docs). Failing to bind the port is logged and
    /// leaves the edge API off; edgecore goes on.
    pub async fn run(mut self, stop: CancellationToken) {
        let Some(cluster_ip) = wait_until(&stop, || self.cluster_ip()).await else {
            return;
        };
        let serving = trust::serving_cert(self.dir.clone(), &self.node, cluster_ip, &self.domain);
        let store = self.store.clone();
        let cluster_ca = move || upstream::cluster_ca(&store);
        let Some(key) = trust::first(&serving, &mut self.sessions, &stop, &cluster_ca).await else {
            return;
        };
        let certificate = Arc::new(ReloadableServerCert::new(key));
        let tls = match verge_pki::server_config(certificate.clone(), &[], false) {
            Ok(mut config) => {
                config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Arc::new(config)
            }
            Err(e) => {
                warn!(error = %verge_runtime::ErrorChain(&e), "edge API off");
                return;
            }
        };
        let Some(gateway) = wait_until(&stop, || self.gateway()).await else {
            return;
        };
        let addr = SocketAddrV4::new(gateway, self.config.port);
        let listener = match verge_edge_net::services::tunnel::bind(addr) {
            Ok(listener) => listener,
            Err(error) => {
                warn!(%addr, %error, "edge API off: its port cannot be bound");
                return;
            }
        };
        info!(%addr, %cluster_ip, "edge API listening");
        let renew = trust::renew(serving, self.sessions.clone(), certificate, cluster_ca);
        let cache = match ApiCache::open(&self.dir.join("cache.redb"), self.config.cache_bytes) {
            Ok(cache) => Some(Arc::new(cache)),
            Err(error) => {
                warn!(%error, "edge API: nothing is kept for offline answers");
                None
            }
        };
        let handler = Arc::new(Handler::new(
            Arc::clone(&self.upstream),
            cache,
            self.store.clone(),
            self.config.decision_max_age,
        ));
        tokio::select! {
            () = stop.cancelled() => {}
            () = renew => {}
            () = serve(listener, tls, handler, stop.clone()) => {}
        }
    }
}

/// `found()` once it is something, looked for every [`WAIT_INTERVAL`]; `None` at `stop`.
async fn wait_until<T>(stop: &CancellationToken, found: impl Fn() -> Option<T>) -> Option<T> {
    loop {
        if let Some(found) = found() {
            return Some(found);
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(WAIT_INTERVAL) => {}
        }
    }
}

/// Accepts connections on `listener` until `stop`, each served on its own task.
async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    handler: Arc<Handler>,
    stop: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (conn, peer) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "edge API: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, handler, stop) = (acceptor.clone(), Arc::clone(&handler), stop.clone());
        verge_runtime::tasks::spawn("edge api connection", async move {
            let _ = conn.set_nodelay(true);
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => return debug!(%peer, %error, "edge API: TLS handshake failed"),
                Err(_) => return debug!(%peer, "edge API: TLS handshake timed out"),
            };
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let handler = Arc::clone(&handler);
                async move { Ok::<_, std::convert::Infallible>(handler.handle(request).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                () = stop.cancelled() => {}
                result = connection => if let Err(error) = result {
                    debug!(%peer, %error, "edge API: connection ended");
                },
            }
        });
    }
}
