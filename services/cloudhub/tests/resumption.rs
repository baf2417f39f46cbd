//! TLS session resumption on EdgeHub: a node that reconnects with the same client
//! configuration resumes its TLS session from a ticket (no certificate exchange), is still
//! identified by the certificate of its first handshake, and is refused once that
//! certificate has expired even though the resumed handshake itself succeeds.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use common::{Hub, WAIT, hello, start};
use hyper_util::rt::TokioIo;
use rustls::HandshakeKind;
use rustls::NamedGroup;
use rustls::client::{
    ClientSessionMemoryCache, ClientSessionStore, Resumption, Tls12ClientSessionValue,
    Tls13ClientSessionValue,
};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::codegen::http::Uri;
use tonic::transport::Channel;
use verge_pki::{CertInfo, ClientIdentity};
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{CloudFrame, Welcome, cloud_frame};

/// A connector for tonic that makes TLS connections with one rustls configuration (so one
/// session store) and records how each handshake went.
#[derive(Clone)]
struct Recording {
    connector: TlsConnector,
    kinds: Arc<Mutex<Vec<HandshakeKind>>>,
}

impl Recording {
    /// A connector presenting `cert`/`key` of a node and trusting `hub`'s CA.
    fn new(hub: &Hub, cert: &str, key: &verge_pki::PrivateKeyPem) -> Self {
        let identity = ClientIdentity {
            cert_chain_pem: cert,
            key_pem: key,
        };
        let config =
            verge_pki::tls::client_config(hub.trust.ca().cert_pem(), Some(identity)).unwrap();
        Self {
            connector: TlsConnector::from(Arc::new(config)),
            kinds: Arc::default(),
        }
    }

    /// The handshakes so far.
    fn kinds(&self) -> Vec<HandshakeKind> {
        self.kinds.lock().unwrap().clone()
    }

    /// A new channel (a new TCP connection and TLS handshake) to `hub`'s EdgeHub.
    async fn channel(&self, hub: &Hub) -> Channel {
        let endpoint = verge_proto::transport::endpoint(&format!("https://{}", hub.edge_addr))
            .unwrap()
            .connect_timeout(WAIT);
        tokio::time::timeout(WAIT, endpoint.connect_with_connector(self.clone()))
            .await
            .expect("connects in time")
            .unwrap()
    }
}

impl tonic::codegen::Service<Uri> for Recording {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = uri.host().unwrap().to_owned();
            let tcp = TcpStream::connect((host.as_str(), uri.port_u16().unwrap())).await?;
            let name = ServerName::try_from(host).unwrap();
            let tls = this.connector.connect(name, tcp).await?;
            let kind = tls.get_ref().1.handshake_kind().expect("handshake done");
            this.kinds.lock().unwrap().push(kind);
            Ok(TokioIo::new(tls))
        })
    }
}

/// Opens `EdgeHub.Connect` on `channel` with a hello naming `node`; the welcome or the
/// call's error. The stream is closed when this returns.
async fn welcome(channel: Channel, node: &str) -> Result<Welcome, tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello(node)).await.unwrap();
    let mut client = EdgeHubClient::new(channel);
    let call = client.connect(ReceiverStream::new(rx));
    let mut inbound = tokio::time::timeout(WAIT, call)
        .await
        .expect("answered in time")?
        .into_inner();
    let first = tokio::time::timeout(WAIT, inbound.message())
        .await
        .expect("a frame in time")?;
    match first {
        Some(CloudFrame {
            frame: Some(cloud_frame::Frame::Welcome(welcome)),
        }) => Ok(welcome),
        other => panic!("expected a welcome, got {other:?}"),
    }
}

/// The value of `verge_cloudhub_tls_handshakes_total{listener="edge",kind=<kind>}`.
fn edge_handshakes(kind: &str) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    verge_cloudhub::metrics::global().register(&mut registry);
    let text = verge_runtime::metrics::encode(&registry).unwrap();
    let prefix =
        format!("verge_cloudhub_tls_handshakes_total{{listener=\"edge\",kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{prefix} missing from\n{text}"))
        .parse()
        .unwrap()
}

/// The second connection with the same client configuration resumes the first one's TLS
/// session, and cloudhub still knows the node from the certificate of the first handshake:
/// its own hello is welcomed, a hello naming another node is refused.
#[tokio::test]
async fn a_reconnect_resumes_the_tls_session_as_the_same_node() {
    let hub = start(common::config()).await;
    let (cert, key) = common::node_cert(hub.trust.ca(), "edge-resumed");
    let client = Recording::new(&hub, &cert, &key);

    let first = welcome(client.channel(&hub).await, "edge-resumed")
        .await
        .unwrap();
    let resumed_before = edge_handshakes("resumed");
    let second = welcome(client.channel(&hub).await, "edge-resumed")
        .await
        .unwrap();
    assert_ne!(first.session_id, second.session_id, "a new session");
    let status = welcome(client.channel(&hub).await, "edge-other")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("edge-resumed") && status.message().contains("edge-other"),
        "{status:?}"
    );
    assert_eq!(
        client.kinds(),
        [
            HandshakeKind::Full,
            HandshakeKind::Resumed,
            HandshakeKind::Resumed
        ]
    );
    // Other tests of this binary may resume too, so at least ours.
    assert!(edge_handshakes("resumed") >= resumed_before + 2);

    // Another client configuration (e.g. after a certificate rotation) has no ticket.
    let other = Recording::new(&hub, &cert, &key);
    welcome(other.channel(&hub).await, "edge-resumed")
        .await
        .unwrap();
    assert_eq!(other.kinds(), [HandshakeKind::Full]);
    hub.stop().await;
}

/// A session resumed after the certificate it was made with has expired completes its TLS
/// handshake (rustls does not verify the certificate again), but cloudhub refuses the call.
#[tokio::test]
async fn a_resumed_session_is_refused_once_its_certificate_expired() {
    let hub = start(common::config()).await;
    let issued = hub
        .trust
        .ca()
        .issue_client(
            "system:node:edge-short",
            Some("system:nodes"),
            Duration::from_secs(4),
        )
        .unwrap();
    let not_after = CertInfo::parse(issued.cert_pem.as_bytes())
        .unwrap()
        .not_after;
    let client = Recording::new(&hub, &issued.cert_pem, &issued.key_pem);
    welcome(client.channel(&hub).await, "edge-short")
        .await
        .unwrap();
    assert_eq!(client.kinds(), [HandshakeKind::Full]);

    // X.509 times have whole seconds; the check is `now > notAfter`.
    let expired = not_after + Duration::from_millis(1_100);
    tokio::time::sleep(
        expired
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    let status = welcome(client.channel(&hub).await, "edge-short")
        .await
        .unwrap_err();
    assert_eq!(
        client.kinds(),
        [HandshakeKind::Full, HandshakeKind::Resumed],
        "the handshake itself resumed"
    );
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("node edge-short")
            && status.message().contains("certificate expired at"),
        "{status:?}"
    );
    assert_eq!(
        hub.trust
            .refusals()
            .expired_certificate
            .load(Ordering::Relaxed),
        1
    );
    // Without a ticket, the expired certificate fails in the handshake.
    let fresh = Recording::new(&hub, &issued.cert_pem, &issued.key_pem);
    let endpoint = verge_proto::transport::endpoint(&format!("https://{}", hub.edge_addr))
        .unwrap()
        .connect_timeout(WAIT);
    if let Ok(channel) = endpoint.connect_with_connector(fresh.clone()).await {
        let status = welcome(channel, "edge-short").await.unwrap_err();
        assert_ne!(status.code(), Code::Ok);
    }
    assert!(!fresh.kinds().contains(&HandshakeKind::Resumed));
    hub.stop().await;
}

/// rustls' in-memory session store, counting the TLS 1.3 tickets taken for resumption.
#[derive(Debug)]
struct CountingStore {
    inner: ClientSessionMemoryCache,
    taken: AtomicUsize,
}

impl ClientSessionStore for CountingStore {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        self.inner.set_kx_hint(server_name, group);
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        self.inner.kx_hint(server_name)
    }

    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.inner.set_tls12_session(server_name, value);
    }

    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.inner.tls12_session(server_name)
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.inner.remove_tls12_session(server_name);
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        self.inner.insert_tls13_ticket(server_name, value);
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        let ticket = self.inner.take_tls13_ticket(server_name);
        if ticket.is_some() {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
        ticket
    }
}

/// `verge_proto::transport::connect_tls` (what edgecore connects with) copies the
/// configuration for every connection; the copies share its session store, so the second
/// connection offers a ticket the first one got.
#[tokio::test]
async fn connect_tls_keeps_the_session_store_of_its_configuration() {
    let hub = start(common::config()).await;
    let (cert, key) = common::node_cert(hub.trust.ca(), "edge-store");
    let identity = ClientIdentity {
        cert_chain_pem: &cert,
        key_pem: &key,
    };
    let mut config =
        verge_pki::tls::client_config(hub.trust.ca().cert_pem(), Some(identity)).unwrap();
    let store = Arc::new(CountingStore {
        inner: ClientSessionMemoryCache::new(8),
        taken: AtomicUsize::new(0),
    });
    config.resumption = Resumption::store(store.clone());
    let config = Arc::new(config);
    for _ in 0..2 {
        let endpoint =
            verge_proto::transport::endpoint(&format!("https://{}", hub.edge_addr)).unwrap();
        let channel = verge_proto::transport::connect_tls(endpoint, config.clone(), None)
            .await
            .unwrap();
        welcome(channel, "edge-store").await.unwrap();
    }
    assert_eq!(
        store.taken.load(Ordering::Relaxed),
        1,
        "the second connection offered a ticket of the first"
    );
    hub.stop().await;
}
