//! Real TLS handshakes on loopback with tokio-rustls.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use verge_pki::pem_io::{cert_from_pem, certs_from_pem};
use verge_pki::{
    ALPN_H2, Ca, ClientIdentity, Error, IssuedCert, ReloadableServerCert, client_config,
    crypto_provider, join_client_config, node_identity, pinned_ca_pem, server_config,
};

use crate::{DAY, new_ca, node_cert};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What the server saw of a successful handshake.
struct Accepted {
    node: Result<String, Error>,
    alpn: Option<Vec<u8>>,
}

/// A listener that completes one TLS handshake per `accept`.
struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
}

impl Server {
    async fn start(config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Accepts one connection, reads one byte and echoes it, and reports the peer.
    async fn accept_one(&self) -> std::io::Result<Accepted> {
        let (tcp, _) = self.listener.accept().await?;
        let mut tls = self.acceptor.accept(tcp).await?;
        let (_, conn) = tls.get_ref();
        let node = conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map_or(
                Err(Error::NoPem {
                    label: "peer certificate",
                }),
                |leaf| node_identity(leaf),
            );
        let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let mut byte = [0_u8; 1];
        tls.read_exact(&mut byte).await?;
        tls.write_all(&byte).await?;
        tls.flush().await?;
        Ok(Accepted { node, alpn })
    }
}

/// Connects to `server`, exchanges one byte, and returns the server's leaf certificate.
async fn exchange(
    server: &Server,
    client: ClientConfig,
    name: &str,
) -> (
    std::io::Result<Accepted>,
    std::io::Result<Vec<CertificateDer<'static>>>,
) {
    let client_side = async {
        let addr = server.listener.local_addr()?;
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(name.to_owned()).map_err(std::io::Error::other)?;
        let mut tls = TlsConnector::from(Arc::new(client))
            .connect(name, tcp)
            .await?;
        // With TLS 1.3 a refused client certificate shows only on the first read.
        tls.write_all(b"x").await?;
        tls.flush().await?;
        let mut byte = [0_u8; 1];
        tls.read_exact(&mut byte).await?;
        let chain = tls
            .get_ref()
            .1
            .peer_certificates()
            .unwrap_or_default()
            .to_vec();
        Ok(chain)
    };
    tokio::join!(server.accept_one(), client_side)
}

/// The error of a failed side, or `"ok"` when it succeeded.
fn why<T>(result: &std::io::Result<T>) -> String {
    result
        .as_ref()
        .err()
        .map_or_else(|| "ok".to_owned(), |e| format!("{e:?}"))
}

fn serving(ca: &Ca) -> Result<IssuedCert, Error> {
    ca.issue_serving(
        "cloudhub",
        &["localhost".to_owned(), "127.0.0.1".to_owned()],
        DAY,
    )
}

/// cloudhub's configuration: a reloadable serving certificate, client certificates required.
fn hub_config(ca: &Ca) -> Result<(Arc<ReloadableServerCert>, ServerConfig), Error> {
    let resolver = Arc::new(ReloadableServerCert::new(serving(ca)?.certified_key()?));
    let config = server_config(resolver.clone(), &[ca.cert_der().clone()], true)?;
    Ok((resolver, config))
}

fn node_client(ca: &Ca, signer: &Ca, node: &str) -> Result<ClientConfig, Error> {
    let (cert_pem, key) = node_cert(signer, node)?;
    let key_pem = key.to_pem();
    client_config(
        ca.cert_pem(),
        Some(ClientIdentity {
            cert_chain_pem: &cert_pem,
            key_pem: &key_pem,
        }),
    )
}

#[tokio::test]
async fn mtls_accepts_a_node_certificate_from_the_ca() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let (_, config) = hub_config(&ca)?;
    let server = Server::start(config).await?;
    let (accepted, chain) = exchange(&server, node_client(&ca, &ca, "edge-1")?, "localhost").await;
    let accepted = accepted?;
    assert_eq!(accepted.node?, "edge-1");
    assert_eq!(accepted.alpn.as_deref(), Some(ALPN_H2));
    // The server presents its certificate and the CA (so joining nodes can pin it).
    assert_eq!(chain?.len(), 2);
    // An IP address SAN works too.
    let (accepted, _) = exchange(&server, node_client(&ca, &ca, "edge-2")?, "127.0.0.1").await;
    assert_eq!(accepted?.node?, "edge-2");
    Ok(())
}

#[tokio::test]
async fn mtls_refuses_no_certificate_and_a_foreign_ca() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let other = new_ca("other-ca")?;
    let (_, config) = hub_config(&ca)?;
    let server = Server::start(config).await?;

    let anonymous = client_config(ca.cert_pem(), None)?;
    let (accepted, client) = exchange(&server, anonymous, "localhost").await;
    assert!(
        why(&accepted).contains("NoCertificatesPresented"),
        "{}",
        why(&accepted)
    );
    assert!(
        why(&client).contains("CertificateRequired"),
        "{}",
        why(&client)
    );

    let foreign = node_client(&ca, &other, "edge-1")?;
    let (accepted, client) = exchange(&server, foreign, "localhost").await;
    assert!(
        why(&accepted).contains("UnknownIssuer"),
        "{}",
        why(&accepted)
    );
    assert!(client.is_err(), "a certificate from another CA got through");

    // And the client refuses a server whose certificate is from another CA.
    let (_, other_config) = hub_config(&other)?;
    let impostor = Server::start(other_config).await?;
    let (_, client) = exchange(&impostor, node_client(&ca, &ca, "edge-1")?, "localhost").await;
    assert!(why(&client).contains("UnknownIssuer"), "{}", why(&client));
    Ok(())
}

#[tokio::test]
async fn rotated_serving_certificate_is_seen_by_new_handshakes() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let (resolver, config) = hub_config(&ca)?;
    let server = Server::start(config).await?;
    let first_leaf = resolver.current().cert.first().cloned();

    let (accepted, chain) = exchange(&server, node_client(&ca, &ca, "edge-1")?, "localhost").await;
    accepted?;
    assert_eq!(chain?.first().cloned(), first_leaf);

    // A session established before the rotation...
    let connector = TlsConnector::from(Arc::new(node_client(&ca, &ca, "edge-3")?));
    let addr = server.listener.local_addr()?;
    let (established, client_stream) = tokio::join!(
        async {
            let (tcp, _) = server.listener.accept().await?;
            server.acceptor.accept(tcp).await
        },
        async {
            let tcp = TcpStream::connect(addr).await?;
            let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
            connector.connect(name, tcp).await
        }
    );
    let (mut established, mut client_stream) = (established?, client_stream?);

    let rotated = serving(&ca)?;
    resolver.replace(rotated.certified_key()?);

    // ...keeps working after it.
    let mut byte = [0_u8; 1];
    client_stream.write_all(b"y").await?;
    client_stream.flush().await?;
    established.read_exact(&mut byte).await?;
    established.write_all(&byte).await?;
    established.flush().await?;
    client_stream.read_exact(&mut byte).await?;
    assert_eq!(&byte, b"y");
    assert_eq!(
        client_stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first()),
        first_leaf.as_ref()
    );
    let (accepted, chain) = exchange(&server, node_client(&ca, &ca, "edge-1")?, "localhost").await;
    accepted?;
    let second_leaf = chain?.first().cloned();
    assert_eq!(second_leaf, Some(cert_from_pem(&rotated.cert_pem)?));
    assert_ne!(second_leaf, first_leaf);
    Ok(())
}

#[tokio::test]
async fn join_pins_the_ca_by_hash() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let (_, config) = hub_config(&ca)?;
    // The join endpoint lets certificate-less clients in (they carry a bootstrap token).
    let resolver = Arc::new(ReloadableServerCert::new(serving(&ca)?.certified_key()?));
    let join_server =
        Server::start(server_config(resolver, &[ca.cert_der().clone()], false)?).await?;
    drop(config);

    let hash = ca.cert_hash()?;
    let (accepted, chain) = exchange(&join_server, join_client_config(&hash)?, "localhost").await;
    assert!(
        accepted?.node.is_err(),
        "an anonymous join client has no node identity"
    );
    let chain = chain?;
    assert_eq!(pinned_ca_pem(&chain, &hash)?, ca.cert_pem());

    // A wrong pin refuses the server before anything (the token) is sent.
    let other = new_ca("other-ca")?;
    let (_, client) = exchange(
        &join_server,
        join_client_config(&other.cert_hash()?)?,
        "localhost",
    )
    .await;
    assert!(why(&client).contains("CaHashMismatch"), "{}", why(&client));
    assert!(matches!(
        pinned_ca_pem(&chain, &other.cert_hash()?),
        Err(Error::CaHashMismatch { .. })
    ));
    // The pinned CA still has to have issued the certificate for the name connected to.
    let (_, client) = exchange(
        &join_server,
        join_client_config(&hash)?,
        "cloudhub.elsewhere",
    )
    .await;
    assert!(why(&client).contains("NotValidForName"), "{}", why(&client));
    Ok(())
}

#[test]
fn signed_client_certificates_verify_only_against_their_ca() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let other = new_ca("other-ca")?;
    let (cert_pem, _) = node_cert(&ca, "edge-1")?;
    let leaf = cert_from_pem(&cert_pem)?;
    let verify = |anchor: &Ca| -> Result<(), Box<dyn std::error::Error>> {
        let mut roots = RootCertStore::empty();
        for cert in certs_from_pem(anchor.cert_pem())? {
            roots.add(cert)?;
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto_provider())
                .build()?;
        verifier.verify_client_cert(&leaf, &[], UnixTime::now())?;
        Ok(())
    };
    verify(&ca)?;
    assert!(verify(&other).is_err());
    Ok(())
}

#[test]
fn mismatched_keys_are_refused() -> TestResult {
    let ca = new_ca("verge-ca")?;
    let a = serving(&ca)?;
    let b = serving(&ca)?;
    assert!(matches!(
        verge_pki::certified_key(&a.chain_pem(), &b.key_pem),
        Err(Error::KeyMismatch)
    ));
    let identity = ClientIdentity {
        cert_chain_pem: &a.cert_pem,
        key_pem: &b.key_pem,
    };
    assert!(matches!(
        client_config(ca.cert_pem(), Some(identity)),
        Err(Error::KeyMismatch)
    ));
    Ok(())
}
