//! The hollow edges' connections: TLS over TCP as edgecore's (`verge_proto::transport`), with
//! every byte read and written on the TCP stream counted (TLS records: HTTP/2 frames, gRPC
//! framing and TLS overhead included; TCP/IP headers and bare ACKs are not).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint};

/// Bytes moved on every hollow edge's TCP stream, summed over all of them.
#[derive(Debug, Default)]
pub struct Bytes {
    /// Written by the edges (upstream), bytes.
    pub up: AtomicU64,
    /// Read by the edges (downstream), bytes.
    pub down: AtomicU64,
}

impl Bytes {
    /// (up, down) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

/// A stream that adds what passes through it to [`Bytes`].
struct Counted<T> {
    inner: T,
    bytes: Arc<Bytes>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.bytes.down.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.bytes.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A node's TLS configuration for the edge stream: `tls` with ALPN `h2`, made once per node
/// so its session store lives across reconnects, as edgecore keeps it.
pub fn h2_config(tls: &ClientConfig) -> Arc<ClientConfig> {
    let mut config = tls.clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// Connects `endpoint` over TLS with `config` (from [`h2_config`]), verifying the server as
/// the endpoint's host, counting the connection's bytes into `bytes`.
///
/// # Errors
/// TCP, TLS or HTTP/2 set-up failures.
pub async fn connect(
    endpoint: Endpoint,
    config: Arc<ClientConfig>,
    bytes: Arc<Bytes>,
) -> Result<Channel, tonic::transport::Error> {
    let connector = TlsConnector::from(config);
    let service = tower::service_fn(move |uri: http::Uri| {
        let (connector, bytes) = (connector.clone(), bytes.clone());
        async move {
            let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
            let host = uri.host().ok_or_else(|| invalid("no host"))?.to_owned();
            let port = uri.port_u16().ok_or_else(|| invalid("no port"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host).map_err(|_| invalid("bad server name"))?;
            let stream = Counted { inner: tcp, bytes };
            connector.connect(name, stream).await.map(TokioIo::new)
        }
    });
    endpoint.connect_with_connector(service).await
}
