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

/// An open `EdgeHub.Connect` stream of a hollow edge: where its frames go, cloudhub's frames,
/// and the keepalive interval the welcome gave.
pub struct Session {
    /// The edge's outbound frames (after the hello).
    pub tx: tokio::sync::mpsc::Sender<verge_proto::hub::EdgeFrame>,
    /// cloudhub's frames after the welcome.
    pub inbound: tonic::Streaming<verge_proto::hub::CloudFrame>,
    /// The welcome's keepalive interval (at least 100 ms).
    pub keepalive: std::time::Duration,
}

/// Why [`open`] failed.
#[derive(Debug)]
pub struct OpenError {
    /// Whether the connection could not be made or cloudhub refused the stream (else it
    /// broke before the welcome, or did not start with one).
    pub connecting: bool,
    /// What went wrong.
    pub error: anyhow::Error,
}

impl OpenError {
    fn connect(error: anyhow::Error) -> Self {
        Self {
            connecting: true,
            error,
        }
    }

    fn protocol(error: anyhow::Error) -> Self {
        Self {
            connecting: false,
            error,
        }
    }
}

/// Opens node `hello`'s session on `endpoint` over TLS `config` (from [`h2_config`]),
/// counting bytes into `bytes`: sends the hello, waits for the welcome.
///
/// # Errors
/// [`OpenError`].
pub async fn open(
    endpoint: Endpoint,
    config: Arc<ClientConfig>,
    bytes: Arc<Bytes>,
    hello: verge_proto::hub::EdgeHello,
) -> Result<Session, OpenError> {
    use verge_proto::hub::{CloudFrame, EdgeFrame, cloud_frame, edge_frame};
    let (tx, rx) = tokio::sync::mpsc::channel::<EdgeFrame>(64);
    let hello = EdgeFrame {
        frame: Some(edge_frame::Frame::Hello(hello)),
    };
    tx.send(hello)
        .await
        .map_err(|_| OpenError::protocol(anyhow::anyhow!("outbound stream closed")))?;
    let outbound = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    let channel = connect(endpoint, config, bytes)
        .await
        .map_err(|e| OpenError::connect(anyhow::Error::new(e).context("connecting")))?;
    let mut inbound = verge_proto::hub::edge_hub_client::EdgeHubClient::new(channel)
        .connect(outbound)
        .await
        .map_err(|status| OpenError::connect(anyhow::anyhow!("connect refused: {status}")))?
        .into_inner();
    let welcome = match inbound.message().await {
        Ok(Some(CloudFrame {
            frame: Some(cloud_frame::Frame::Welcome(w)),
        })) => w,
        other => {
            let e = anyhow::anyhow!("expected a welcome, got {other:?}");
            return Err(OpenError::protocol(e));
        }
    };
    Ok(Session {
        tx,
        inbound,
        keepalive: std::time::Duration::from_millis(welcome.keepalive_interval_ms.max(100)),
    })
}

/// The message of cloudhub's next frame, or why the stream is over.
///
/// # Errors
/// The stream ended, failed, or carried something other than a message.
pub fn message(
    frame: Result<Option<verge_proto::hub::CloudFrame>, tonic::Status>,
) -> anyhow::Result<verge_proto::Message> {
    use verge_proto::hub::{CloudFrame, cloud_frame};
    match frame {
        Ok(Some(CloudFrame {
            frame: Some(cloud_frame::Frame::Message(m)),
        })) => Ok(m),
        Ok(Some(other)) => anyhow::bail!("unexpected frame {other:?}"),
        Ok(None) => anyhow::bail!("cloudhub ended the stream"),
        Err(status) => anyhow::bail!("stream failed: {status}"),
    }
}

/// Sends `envelope` on a session's outbound stream.
///
/// # Errors
/// The stream is closed.
pub async fn send(
    tx: &tokio::sync::mpsc::Sender<verge_proto::hub::EdgeFrame>,
    envelope: verge_core::Envelope,
) -> anyhow::Result<()> {
    use verge_proto::hub::{EdgeFrame, edge_frame};
    let frame = EdgeFrame {
        frame: Some(edge_frame::Frame::Message(verge_proto::Message::from(
            envelope,
        ))),
    };
    tx.send(frame)
        .await
        .map_err(|_| anyhow::anyhow!("outbound stream closed"))
}

/// The first failure of any hollow edge, for the report.
#[derive(Debug, Default)]
pub struct FirstError(std::sync::Mutex<Option<String>>);

impl FirstError {
    /// Keeps `error` of `node` if it is the first.
    pub fn record(&self, node: &str, error: &str) {
        let mut first = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert_with(|| format!("{node}: {error}"));
    }

    /// The first failure, if any.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
