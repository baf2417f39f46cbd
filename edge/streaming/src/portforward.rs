//! `kubectl port-forward` over SPDY (`portforward.k8s.io`), as the kubelet's streaming
//! server (k8s.io/cri-streaming `portforward`) serves it: per forwarded connection the
//! client opens an `error` and a `data` stream with the same `requestID` and `port`; once
//! both exist, the data stream is joined to a TCP connection to `127.0.0.1:<port>` inside the
//! pod's network namespace. Many pairs run at once on one session.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::{Instrument, debug, info};

use super::netns;
use super::spdy::{IncomingStream, RstStatus, Session, SessionConfig, Stream};

/// The only protocol.
pub const PROTOCOL: &str = "portforward.k8s.io";

/// How long the second stream of a pair may take (the kubelet's `streamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The pod to forward into.
#[derive(Debug, Clone)]
pub struct Target {
    /// A process in the pod's network namespace (the sandbox's).
    pub sandbox_pid: u32,
    /// The pod as error messages name it (`<name>_<namespace>`, the kubelet's full name).
    pub pod: String,
    /// The pod's UID, if the URL named it.
    pub uid: String,
}

/// Why a stream is refused or a pair fails; the texts are the kubelet's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A header is missing.
    #[error("{0:?} header is required")]
    MissingHeader(&'static str),
    /// `port` is not a u16.
    #[error("unable to parse {0:?} as a port")]
    BadPort(String),
    /// `port` is 0.
    #[error("port {0:?} must be > 0")]
    PortZero(String),
    /// `streamType` is neither `data` nor `error`.
    #[error("invalid stream type {0:?}")]
    BadStreamType(String),
    /// A pair got a second stream of one type.
    #[error("{0} stream already assigned")]
    Duplicate(&'static str),
}

/// A validated stream of a pair.
#[derive(Debug, PartialEq, Eq)]
struct Header {
    port: u16,
    data: bool,
    request_id: String,
}

/// Validates a new stream's headers (`port`, `streamType`, `requestID`); a missing
/// `requestID` (very old clients) is derived from the stream id as the kubelet does.
fn validate(stream_id: u32, headers: &super::spdy::Headers) -> Result<Header, Error> {
    let port_text = headers.get("port").ok_or(Error::MissingHeader("port"))?;
    let port: u16 = port_text
        .parse()
        .map_err(|_| Error::BadPort(port_text.to_owned()))?;
    if port == 0 {
        return Err(Error::PortZero(port_text.to_owned()));
    }
    let data = match headers
        .get("streamtype")
        .ok_or(Error::MissingHeader("streamType"))?
    {
        "data" => true,
        "error" => false,
        other => return Err(Error::BadStreamType(other.to_owned())),
    };
    let request_id = match headers.get("requestid") {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ if data => i64::from(stream_id).saturating_sub(2).to_string(),
        _ => stream_id.to_string(),
    };
    Ok(Header {
        port,
        data,
        request_id,
    })
}

/// A pair being assembled.
#[derive(Debug, Default)]
struct Pair {
    data: Option<(u16, Stream)>,
    error: Option<Stream>,
}

/// Serves one port-forward session on `io` (after the `101`) until the client closes it.
pub async fn serve<T>(io: T, target: Target)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut session = Session::new(io, SessionConfig::default());
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let (expired_tx, mut expired_rx) = mpsc::unbounded_channel::<String>();
    loop {
        tokio::select! {
            incoming = session.next_stream() => {
                let Some(incoming) = incoming else { break };
                add_stream(incoming, &mut pairs, &expired_tx, &target).await;
            }
            Some(request_id) = expired_rx.recv() => {
                if let Some(pair) = pairs.remove(&request_id) {
                    let message = format!("(request={request_id}) timed out waiting for streams");
                    info!(request_id, "port-forward pair incomplete after 30 s");
                    fail(pair.error, pair.data.map(|(_, d)| d), &message).await;
                }
            }
        }
    }
    debug!("port-forward session closed by the client");
}

async fn add_stream(
    incoming: IncomingStream,
    pairs: &mut HashMap<String, Pair>,
    expired: &mpsc::UnboundedSender<String>,
    target: &Target,
) {
    let header = match validate(incoming.id(), incoming.headers()) {
        Ok(header) => header,
        Err(error) => {
            debug!(%error, stream = incoming.id(), "port-forward stream refused");
            incoming.reject(RstStatus::RefusedStream);
            return;
        }
    };
    let stream = incoming.accept();
    let id = header.request_id;
    let pair = pairs.entry(id.clone()).or_insert_with(|| {
        let expired = expired.clone();
        let id = id.clone();
        verge_runtime::tasks::spawn("port-forward pair timeout", async move {
            tokio::time::sleep(STREAM_CREATION_TIMEOUT).await;
            let _ = expired.send(id);
        });
        Pair::default()
    });
    let duplicate = if header.data {
        if pair.data.is_some() {
            Some(Error::Duplicate("data"))
        } else {
            pair.data = Some((header.port, stream));
            None
        }
    } else if pair.error.is_some() {
        Some(Error::Duplicate("error"))
    } else {
        pair.error = Some(stream);
        None
    };
    if let Some(error) = duplicate {
        if let Some(error_stream) = &mut pair.error {
            let message = format!("error processing stream for request {id}: {error}");
            let _ = error_stream.writer.write_all(message.as_bytes()).await;
        }
        return;
    }
    if pair.data.is_some()
        && pair.error.is_some()
        && let Some(Pair {
            data: Some((port, data)),
            error: Some(error),
        }) = pairs.remove(&id)
    {
        let target = target.clone();
        let span = tracing::debug_span!("portforward.pair", request_id = %id, port);
        verge_runtime::tasks::spawn(
            "port-forward",
            forward(data, error, port, target).instrument(span),
        );
    }
}

/// Joins a complete pair to a connection inside the pod; on failure the message goes to the
/// error stream and the data stream is reset.
async fn forward(data: Stream, error: Stream, port: u16, target: Target) {
    let connection = match netns::connect(target.sandbox_pid, port).await {
        Ok(connection) => connection,
        Err(cause) => {
            let message = format!(
                "error forwarding port {port} to pod {}, uid {}: {}",
                target.pod,
                target.uid,
                super::error::chain(&cause)
            );
            info!(%message, "port-forward failed");
            fail(Some(error), Some(data), &message).await;
            return;
        }
    };
    let (mut from_client, mut to_client) = data.split();
    let (mut from_pod, mut to_pod) = connection.into_split();
    let upstream = async {
        let result = tokio::io::copy(&mut from_client, &mut to_pod).await;
        let _ = to_pod.shutdown().await;
        result
    };
    let downstream = async {
        let result = tokio::io::copy(&mut from_pod, &mut to_client).await;
        let _ = to_client.shutdown().await;
        result
    };
    let (up, down) = tokio::join!(upstream, downstream);
    debug!(?up, ?down, "port-forward connection done");
    let (_, mut error_writer) = error.split();
    let _ = error_writer.shutdown().await;
}

/// Writes `message` to the error stream and ends it (FIN); resets the data stream.
async fn fail(error: Option<Stream>, data: Option<Stream>, message: &str) {
    if let Some(error) = error {
        let (_, mut writer) = error.split();
        let _ = writer.write_all(message.as_bytes()).await;
        let _ = writer.shutdown().await;
    }
    if let Some(data) = data {
        data.split().1.reset();
    }
}

#[cfg(test)]
#[path = "portforward_tests.rs"]
mod tests;
