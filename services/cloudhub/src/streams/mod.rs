//! kubectl logs, exec, attach and port-forward for edge nodes (architecture.md §10): an HTTP
//! CONNECT listener for the API server's egress selector, whose connections to an edge
//! node's kubelet endpoint travel over the node's own session as `EdgeHub.Tunnel` streams,
//! forwarded between replicas to the one holding the session. No iptables, no host routes.
//!
//! # Layout
//! - [`config`]: [`StreamsConfig`] (YAML `streams:`).
//! - `clients`: who may CONNECT (each name only from the CA meant to issue it).
//! - `connect`: the CONNECT handler and its answers.
//! - `route`: where a CONNECT goes.
//! - `tunnel`: tunnels waiting for their node's `EdgeHub.Tunnel` call.
//! - `peers`: the other replicas' listeners (one Lease per replica).
//! - `serving`: kubelet serving certificates for nodes (`kubernetes.io/kubelet-serving`).
//! - `dial`: edge pods' connections to Service endpoints across the link (`EdgeHub.Dial`).

mod clients;
pub mod config;
pub(crate) mod connect;
pub(crate) mod dial;
pub(crate) mod peers;
mod route;
pub(crate) mod serving;
pub(crate) mod tunnel;

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_pki::{ClientIdentity, PrivateKeyPem, ReloadableServerCert};
use verge_proto::hub::KubeletClients;

pub use config::StreamsConfig;
pub use peers::{ADDRESS_ANNOTATION, PEER_LABEL, PEER_NAME};
pub use serving::KUBELET_SERVING_SIGNER;

use crate::trust::tls::{self, ServerTls};
use crate::trust::{Trust, TrustConfig};
use crate::{Error, Result, Shared};

/// What streams need beyond cloudhub's own configuration: an API server client (Nodes,
/// peer Leases, serving CSRs). Hand it to [`crate::CloudHub::with_streams`].
#[derive(Clone)]
pub struct Streams {
    client: kube::Client,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Streams")
    }
}

impl Streams {
    /// Streams calling the API server through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// The running streams of one replica.
pub(crate) struct StreamsState {
    pub config: StreamsConfig,
    pub client: kube::Client,
    pub tunnels: tunnel::PendingTunnels,
    /// The EndpointSlices that `EdgeHub.Dial` checks against.
    pub endpoints: Arc<dial::ServiceEndpoints>,
    pub peers: Arc<peers::Peers>,
    /// Sent to every node in `Welcome` (`None`: no kubelet client CA configured).
    pub kubelet_clients: Option<KubeletClients>,
    /// Who may CONNECT: replicas from the Verge CA, `clientNames` from `clientCaFile`.
    clients: clients::ClientTrust,
}

/// Reads a PEM file for `field`.
fn read_pem(field: &'static str, path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::FileRead {
        field,
        path: path.display().to_string(),
        source,
    })
}

impl StreamsState {
    /// Sets streams up: the kubelet client CA for edges, the peer client identity (issued
    /// from the Verge CA), and the listener's TLS configuration.
    pub(crate) fn new(
        streams: &Streams,
        config: StreamsConfig,
        trust: &Trust,
        tls: &ServerTls,
        replica: String,
        listener: &TcpListener,
    ) -> Result<(Arc<Self>, Arc<ServerConfig>)> {
        let kubelet_clients = match config.effective_kubelet_client_ca() {
            Some(path) => Some(KubeletClients {
                ca_certificates: read_pem("streams.kubeletClientCaFile", &path)?,
                names: config.kubelet_client_names.clone(),
            }),
            None => {
                warn!(
                    "no kubelet client CA (streams.kubeletClientCaFile): edges refuse kubectl logs/exec"
                );
                None
            }
        };
        let ca = trust.ca();
        let egress_cas = match &config.client_ca_file {
            Some(path) => {
                let pem = read_pem("streams.clientCaFile", path)?;
                verge_pki::pem_io::certs_from_pem(&pem).map_err(trust_error)?
            }
            None => Vec::new(),
        };
        let mut client_cas = vec![ca.cert_der().clone()];
        client_cas.extend(egress_cas.iter().cloned());
        let server = match (&config.tls_cert_file, &config.tls_key_file) {
            (Some(cert), Some(key)) => {
                let chain = read_pem("streams.tlsCertFile", cert)?;
                let key = PrivateKeyPem::new(read_pem("streams.tlsKeyFile", key)?);
                let certified = verge_pki::certified_key(&chain, &key).map_err(trust_error)?;
                let resolver = Arc::new(ReloadableServerCert::new(certified));
                Arc::new(
                    verge_pki::server_config(resolver, &client_cas, true).map_err(trust_error)?,
                )
            }
            _ => tls.with_client_cas(&client_cas)?,
        };
        // The listener speaks HTTP/1.1 (CONNECT). A Go client behind `HTTPS_PROXY` (e.g.
        // metrics-server) offers `h2` first; `http/1.1` is preferred so that it is what is
        // negotiated, and `h2` stays for peer replicas, whose client offers only that.
        let mut server = Arc::unwrap_or_clone(server);
        server.alpn_protocols = vec![b"http/1.1".to_vec(), verge_pki::ALPN_H2.to_vec()];
        let server = Arc::new(server);
        let peer = ca
            .issue_client(PEER_NAME, None, trust.config().server_cert_validity)
            .map_err(trust_error)?;
        let peer_tls = verge_pki::client_config(
            ca.cert_pem(),
            Some(ClientIdentity {
                cert_chain_pem: &peer.cert_pem,
                key_pem: &peer.key_pem,
            }),
        )
        .map_err(trust_error)?;
        let advertise = advertise_address(&config, listener);
        let trust_config: &TrustConfig = trust.config();
        let namespace = match config.peer_namespace.as_str() {
            "" => Some(trust_config.namespace.clone()),
            "*" => None,
            other => Some(other.to_owned()),
        };
        let home = namespace
            .clone()
            .unwrap_or_else(|| trust_config.namespace.clone());
        let peers = peers::Peers::new(
            streams.client.clone(),
            namespace,
            home,
            replica,
            advertise,
            Arc::new(peer_tls),
            config.dial_timeout,
        );
        let clients = clients::ClientTrust::new(
            ca.cert_der().clone(),
            egress_cas,
            config.client_names.clone(),
        );
        Ok((
            Arc::new(Self {
                config,
                client: streams.client.clone(),
                tunnels: tunnel::PendingTunnels::default(),
                endpoints: Arc::default(),
                peers: Arc::new(peers),
                kubelet_clients,
                clients,
            }),
            server,
        ))
    }
}

fn trust_error(error: verge_pki::Error) -> Error {
    Error::Trust(crate::trust::TrustError::Pki(error))
}

/// `streams.advertiseAddress`, else `$POD_IP` with the listener's port, else the listener's
/// address.
fn advertise_address(config: &StreamsConfig, listener: &TcpListener) -> String {
    if let Some(address) = &config.advertise_address {
        return address.clone();
    }
    let local = listener.local_addr().ok();
    let port = local.map_or(config.addr.port(), |a| a.port());
    match std::env::var("POD_IP") {
        Ok(ip) if !ip.is_empty() => format!("{ip}:{port}"),
        _ => local.map_or_else(|| config.addr.to_string(), |a| a.to_string()),
    }
}

/// Serves CONNECTs on `listener` until `stop`, and keeps this replica's peer Lease.
pub(crate) async fn serve(
    listener: TcpListener,
    server: Arc<ServerConfig>,
    shared: Arc<Shared>,
    state: Arc<StreamsState>,
    stop: CancellationToken,
) {
    info!(addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()), "streams CONNECT listener serving");
    shared
        .tracker
        .spawn(state.peers.clone().publish(stop.clone()));
    let mut incoming = tls::incoming(listener, server, &shared.config.trust, "streams", stop);
    while let Some(accepted) = incoming.next().await {
        let Ok(stream) = accepted else { continue };
        let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
        let leaf = chain.first();
        let Some(client) = state.clients.identify(chain) else {
            debug!("CONNECT client refused: not a name its certificate's CA may vouch for");
            continue;
        };
        // A resumed TLS session carries the certificate of an earlier handshake, unverified.
        if let Some(leaf) = leaf
            && let Err(error) = tls::check_peer_validity(leaf, &client.name, SystemTime::now())
        {
            warn!(%error, "CONNECT client refused");
            continue;
        }
        let peer_client = client.peer;
        let (shared, state) = (shared.clone(), state.clone());
        verge_runtime::tasks::spawn("CONNECT connection", async move {
            let service = service_fn(move |request| {
                connect::handle(request, shared.clone(), state.clone(), peer_client)
            });
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
            if let Err(error) = served {
                debug!(%error, "CONNECT connection ended");
            }
        });
    }
}
