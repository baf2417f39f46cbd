//! Scraping a node's kubelet endpoint the way metrics-server does: an HTTPS `CONNECT` to the
//! kit's streams front (a cloudhub) with metrics-server's client certificate, then TLS to
//! the node through the tunnel (verified with the cluster CA) and HTTP/1.1 GETs on that one
//! kept-alive connection. The front carries an edge's connection to the cloudhub holding
//! its session and dials the kubelet node directly.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use verge_pki::ClientIdentity;

/// One kept-alive connection to a node's kubelet endpoint through the front.
pub struct Scraper {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    authority: String,
}

/// A TLS client of the cluster CA with metrics-server's certificate, speaking HTTP/1.1.
fn tls(cp: &verge_testkit::ControlPlane) -> anyhow::Result<Arc<ClientConfig>> {
    let (cert, key) = verge_testkit::metrics_server::client_certificate(cp)?;
    let ca = std::fs::read_to_string(cp.ca_cert_path())?;
    let mut config = verge_pki::client_config(
        &ca,
        Some(ClientIdentity {
            cert_chain_pem: &cert,
            key_pem: &verge_pki::PrivateKeyPem::new(key),
        }),
    )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Scraper {
    /// Connects to `host` (a node's `Hostname` address: an IP literal or a name) port
    /// `port` through `cp`'s streams front.
    ///
    /// # Errors
    /// The front refuses the CONNECT (its reason), or a TLS handshake fails.
    pub async fn connect(
        cp: &verge_testkit::ControlPlane,
        host: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let config = tls(cp)?;
        let connector = TlsConnector::from(config);
        let tcp = TcpStream::connect(("127.0.0.1", cp.streams_front_port())).await?;
        let _ = tcp.set_nodelay(true);
        let front_name = ServerName::try_from("127.0.0.1")?;
        let mut outer = connector
            .connect(front_name, tcp)
            .await
            .context("TLS to the front")?;
        let authority = match host.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{host}]:{port}"),
            Err(_) => format!("{host}:{port}"),
        };
        outer
            .write_all(
                format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
            )
            .await?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let byte = outer
                .read_u8()
                .await
                .context("reading the CONNECT answer")?;
            head.push(byte);
            if head.len() > 8192 {
                bail!("the CONNECT answer's head is too long");
            }
        }
        let status = String::from_utf8_lossy(&head);
        if !status.starts_with("HTTP/1.1 200") {
            bail!(
                "CONNECT {authority}: {}",
                status.lines().next().unwrap_or_default()
            );
        }
        let node_name = ServerName::try_from(host.to_owned())?;
        let inner = connector
            .connect(node_name, outer)
            .await
            .with_context(|| format!("TLS to {authority}"))?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(inner)).await?;
        verge_runtime::tasks::spawn("bench scrape connection", async move {
            let _ = connection.await;
        });
        Ok(Self { sender, authority })
    }

    /// `GET path`: the answer's length in bytes.
    ///
    /// # Errors
    /// The request fails or is not answered 200.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<usize> {
        self.sender.ready().await?;
        let request = http::Request::get(path)
            .header(http::header::HOST, &self.authority)
            .body(Empty::<Bytes>::new())?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "GET {path} at {}: {status}: {}",
                self.authority,
                String::from_utf8_lossy(&body)
            );
        }
        Ok(body.len())
    }
}
