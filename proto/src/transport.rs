//! gRPC channels over TLS with a caller-made rustls configuration: the Verge CA as the only
//! root, an optional client certificate (EdgeHub's mutual TLS), and an optional server name
//! to verify instead of the address's host (kubeconfig's `tls-server-name`), for peers that
//! reach cloudhub through an address its serving certificate does not name.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint};

/// The endpoint of `address` (`https://host:port`, or `host:port`) for [`connect_tls`], on
/// which the caller sets timeouts and keepalives. tonic itself only carries the HTTP/2
/// connection (its URI says `http`); TLS is done by [`connect_tls`]'s connector, always.
/// HTTP/2 flow-control windows are [`STREAM_WINDOW`] and [`CONNECTION_WINDOW`]: with
/// HTTP/2's 64 KiB default a tunnelled stream such as `kubectl cp` is held to 64 KiB per
/// round trip. They are fixed rather than adaptive ([`Endpoint::http2_adaptive_window`]):
/// adaptive windows measure the bandwidth-delay product with a PING whenever data arrives,
/// so on an idle session most keepalives drew a PING and its answer in each direction. With
/// fixed windows (and the trimmed periodic node status) an idle node's traffic fell from 881
/// to 452 bytes a minute up and from 649 to 417 down (`cargo xtask bench scale`).
///
/// # Errors
/// [`EndpointError::Plaintext`] for an `http://` address (Verge has no plaintext mode),
/// [`EndpointError::Invalid`] when it is not a URI with a host and port.
pub fn endpoint(address: &str) -> Result<Endpoint, EndpointError> {
    let rest = match address.split_once("://") {
        None => address,
        Some(("https", rest)) => rest,
        Some(("http", _)) => return Err(EndpointError::Plaintext(address.to_owned())),
        Some(_) => return Err(EndpointError::Invalid(address.to_owned())),
    };
    let uri: http::Uri = format!("http://{rest}")
        .parse()
        .map_err(|_| EndpointError::Invalid(address.to_owned()))?;
    if uri.host().is_none() || uri.port_u16().is_none() {
        return Err(EndpointError::Invalid(address.to_owned()));
    }
    Ok(Endpoint::from(uri)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW))
}

/// The HTTP/2 flow-control window of each stream on Verge's edge connections (both ends),
/// bytes: at most this much of one stream is in flight unread, so a tunnel moves up to
/// 512 KiB per round trip (10 MiB/s at 50 ms).
pub const STREAM_WINDOW: u32 = 512 * 1024;

/// The HTTP/2 flow-control window of a whole edge connection (both ends), bytes: two
/// streams' worth.
pub const CONNECTION_WINDOW: u32 = 2 * STREAM_WINDOW;

/// Why an address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// A plaintext `http://` address.
    #[error("{0:?} is plaintext; cloudhub is only reachable over TLS: use https://<host>:<port>")]
    Plaintext(String),
    /// Not `https://<host>:<port>`.
    #[error("invalid address {0:?}: expected https://<host>:<port>")]
    Invalid(String),
}

/// Connects `endpoint` (from [`endpoint`]; its timeouts apply) over TLS with
/// `config` (ALPN is set to `h2` here), verifying the server as `server_name` when given,
/// else as the URI's host.
///
/// # Errors
/// The TCP connection, the TLS handshake (e.g. an untrusted server, or a client
/// certificate the server refuses) or HTTP/2 setup fails.
pub async fn connect_tls(
    endpoint: Endpoint,
    config: Arc<ClientConfig>,
    server_name: Option<String>,
) -> Result<Channel, tonic::transport::Error> {
    let mut config = (*config).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = TlsConnector::from(Arc::new(config));
    let service = tower::service_fn(move |uri: http::Uri| {
        let connector = connector.clone();
        let server_name = server_name.clone();
        async move {
            connect_one(&connector, &uri, server_name)
                .await
                .map(TokioIo::new)
        }
    });
    endpoint.connect_with_connector(service).await
}

/// One TLS connection to `uri`'s host and port.
async fn connect_one(
    connector: &TlsConnector,
    uri: &http::Uri,
    server_name: Option<String>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned());
    let host = uri
        .host()
        .ok_or_else(|| invalid("the address has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri
        .port_u16()
        .ok_or_else(|| invalid("the address has no port"))?;
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(server_name.unwrap_or(host))
        .map_err(|_| invalid("invalid TLS server name"))?;
    connector.connect(name, tcp).await
}
