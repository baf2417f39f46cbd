//! Waiting for the client's streams (cri-streaming `waitForStreams`): every SYN_STREAM is
//! answered at once (client-go waits for each reply before opening the next), and the
//! session is ready once `1 + stdin + stdout + stderr + resize` known streams arrived.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::Error;
use super::options::Options;
use super::protocol::Protocol;
use crate::spdy::Session;

/// How long the client has to open all its streams (the kubelet's `streamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream the client writes: stdin or resize events.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// A stream the client reads: stdout, stderr or the error (status) stream.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The streams of one exec or attach, whatever carries them (SPDY streams or WebSocket
/// channels).
pub struct Streams {
    /// The error (status) stream's sending half.
    pub error: Writer,
    /// Bytes for the process's stdin.
    pub stdin: Option<Reader>,
    /// Where the process's stdout goes.
    pub stdout: Option<Writer>,
    /// Where the process's stderr goes (never with a TTY).
    pub stderr: Option<Writer>,
    /// `{"Width":W,"Height":H}` objects (TTY; SPDY protocol v3+, every WebSocket protocol).
    pub resize: Option<Reader>,
    /// Held until the end, then dropped: the SPDY sending halves of stdin, resize and unknown
    /// streams (dropping them resets those streams, as the kubelet does).
    pub held: Vec<Box<dyn Send>>,
}

impl fmt::Debug for Streams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streams")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("resize", &self.resize.is_some())
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

/// Accepts streams until all expected ones arrived.
///
/// # Errors
/// [`Error::StreamCreationTimeout`] after `timeout`; [`Error::SessionClosed`] if the client
/// went away; [`Error::NoErrorStream`] if the streams are complete without an error stream.
pub async fn wait_for_streams(
    session: &mut Session,
    options: &Options,
    protocol: Protocol,
    timeout: Duration,
) -> Result<Streams, Error> {
    let expected = 1
        + usize::from(options.stdin)
        + usize::from(options.stdout)
        + usize::from(options.stderr)
        + usize::from(options.tty && protocol.resizes());
    let collect = async {
        let mut received = 0;
        let mut error: Option<Writer> = None;
        let (mut stdin, mut resize): (Option<Reader>, Option<Reader>) = (None, None);
        let (mut stdout, mut stderr): (Option<Writer>, Option<Writer>) = (None, None);
        let mut held: Vec<Box<dyn Send>> = Vec::new();
        while received < expected {
            let incoming = session.next_stream().await.ok_or(Error::SessionClosed)?;
            let kind = incoming
                .headers()
                .get("streamtype")
                .unwrap_or("")
                .to_owned();
            let (reader, writer) = incoming.accept().split();
            match kind.as_str() {
                "error" => error = Some(Box::new(writer)),
                "stdin" => {
                    stdin = Some(Box::new(reader));
                    held.push(Box::new(writer));
                }
                "stdout" => stdout = Some(Box::new(writer)),
                "stderr" => stderr = Some(Box::new(writer)),
                "resize" => {
                    resize = Some(Box::new(reader));
                    held.push(Box::new(writer));
                }
                other => {
                    // Kept open, not counted, as the kubelet does.
                    debug!(stream_type = other, "unexpected stream type");
                    held.push(Box::new(writer));
                    continue;
                }
            }
            received += 1;
        }
        Ok(Streams {
            error: error.ok_or(Error::NoErrorStream)?,
            stdin,
            stdout,
            stderr,
            resize,
            held,
        })
    };
    tokio::time::timeout(timeout, collect)
        .await
        .map_err(|_| Error::StreamCreationTimeout)?
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};
    use tokio::io::AsyncReadExt;
    use tokio_util::codec::Framed;

    use super::*;
    use crate::spdy::{Frame, Headers, SessionConfig, SpdyCodec};

    fn syn(stream_id: u32, streamtype: &str) -> Frame {
        Frame::SynStream {
            stream_id,
            associated_id: 0,
            priority: 0,
            flags: 0,
            headers: Headers(vec![("streamtype".into(), streamtype.into())]),
        }
    }

    fn options(query: &str) -> Options {
        Options::from_query(query).expect("valid query")
    }

    #[tokio::test]
    async fn every_stream_is_replied_at_once_and_collected() {
        let (server, client) = tokio::io::duplex(1 << 16);
        let mut session = Session::new(server, SessionConfig::default());
        let mut client = Framed::new(client, SpdyCodec::default());
        let opts = options("command=sh&input=1&output=1&tty=1");
        let wait = tokio::spawn(async move {
            let streams =
                wait_for_streams(&mut session, &opts, Protocol::V4, STREAM_CREATION_TIMEOUT).await;
            (session, streams)
        });
        // client-go's order, each after the previous reply; an unknown type is not counted.
        for (id, kind) in [
            (1, "error"),
            (3, "stdin"),
            (5, "bogus"),
            (7, "stdout"),
            (9, "resize"),
        ] {
            client.send(syn(id, kind)).await.expect("send");
            match client.next().await.expect("frame").expect("decode") {
                Frame::SynReply { stream_id, .. } => assert_eq!(stream_id, id),
                other => panic!("expected a reply to {id}, got {other:?}"),
            }
        }
        let (_session, streams) = wait.await.expect("task");
        let mut streams = streams.expect("complete");
        assert!(streams.stdout.is_some() && streams.stderr.is_none());
        assert_eq!(
            streams.held.len(),
            3,
            "stdin, resize and the unknown kept open"
        );
        client
            .send(Frame::Data {
                stream_id: 3,
                fin: true,
                data: Bytes::from_static(b"in"),
            })
            .await
            .expect("send");
        let mut stdin = String::new();
        streams
            .stdin
            .take()
            .expect("stdin")
            .read_to_string(&mut stdin)
            .await
            .expect("read");
        assert_eq!(stdin, "in");
    }

    #[tokio::test]
    async fn v2_has_no_resize_stream() {
        let (server, client) = tokio::io::duplex(1 << 16);
        let mut session = Session::new(server, SessionConfig::default());
        let mut client = Framed::new(client, SpdyCodec::default());
        client.send(syn(1, "error")).await.expect("send");
        client.send(syn(3, "stdout")).await.expect("send");
        let opts = options("output=1&tty=1");
        let streams = wait_for_streams(&mut session, &opts, Protocol::V2, STREAM_CREATION_TIMEOUT)
            .await
            .expect("complete without resize");
        assert!(streams.resize.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn missing_streams_time_out() {
        let (server, client) = tokio::io::duplex(1 << 16);
        let mut session = Session::new(server, SessionConfig::default());
        let mut client = Framed::new(client, SpdyCodec::default());
        client.send(syn(1, "error")).await.expect("send");
        let opts = options("output=1&error=1");
        let result =
            wait_for_streams(&mut session, &opts, Protocol::V4, STREAM_CREATION_TIMEOUT).await;
        assert!(matches!(result, Err(Error::StreamCreationTimeout)));
    }
}
