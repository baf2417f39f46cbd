//! `exec` and `attach` over WebSocket, as the kubelet serves them beside SPDY (cri-streaming
//! `remotecommand/websocket.go` on apimachinery's `wsstream`).
//!
//! The API server passes a client's WebSocket upgrade for `exec`/`attach` through to the
//! node when the client asks for a protocol older than `v5.channel.k8s.io` (which the API
//! server translates to SPDY itself); Kubernetes' node conformance spec "Pods should support
//! remote command execution over websockets" does exactly that with `channel.k8s.io`.
//!
//! # Protocol
//! - Subprotocols: `channel.k8s.io` and `v4.channel.k8s.io` carry binary messages whose
//!   first byte is the channel; `base64.channel.k8s.io` and `v4.base64.channel.k8s.io` carry
//!   text messages whose first character is the channel digit and whose rest is base64. No
//!   subprotocol at all means `channel.k8s.io`. The first one the client lists that this
//!   server speaks is chosen; a client listing only others gets 403.
//! - Channels: 0 stdin, 1 stdout, 2 stderr (client-bound), 3 error (the final status),
//!   4 resize (`{"Width":W,"Height":H}`). Messages for channels the query did not ask for are
//!   ignored, as are messages for unknown channels.
//! - Right after the upgrade, one empty message goes to the lowest client-bound channel the
//!   query asked for (stdout, else stderr, else error), as the kubelet signals readiness.
//! - The end: the status on channel 3 (the `v4.` protocols: the JSON status, always; the
//!   others: nothing on success, the failure message otherwise), then a close frame.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::ws::{Message, WebSocket};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http::{HeaderMap, header};
use tokio::io::{AsyncWrite, AsyncWriteExt as _, DuplexStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;
use tracing::debug;

use super::Kind;
use super::options::Options;
use super::protocol::Protocol;
use super::streams::{Reader, Streams, Writer};
use verge_container_runtime::StreamingRuntime;

/// The subprotocols served, most capable first.
pub const PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// The largest message accepted from the client (stdin chunk or resize event), in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// Bytes buffered between the WebSocket and stdin or resize before the reader waits.
const PIPE_BYTES: usize = 64 * 1024;
/// Client-bound messages queued before the process's output waits.
const QUEUE_MESSAGES: usize = 16;

/// Whether `headers` ask for a WebSocket upgrade (`Upgrade: websocket` and a `Connection`
/// header naming `upgrade`), as apimachinery's `IsWebSocketRequest` decides.
pub fn requested(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    let connection = headers.get_all(header::CONNECTION).iter().any(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .split(',')
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
    });
    upgrade && connection
}

/// The subprotocol to answer with: `Ok(None)` when the client lists none (served as
/// `channel.k8s.io` without naming it), else the first listed one in [`PROTOCOLS`].
///
/// # Errors
/// The client lists subprotocols, none of which is served; the text names both sides.
pub fn choose(headers: &HeaderMap) -> Result<Option<&'static str>, String> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|p| p.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok(None);
    }
    offered
        .iter()
        .find_map(|o| PROTOCOLS.iter().find(|p| **p == o.as_str()).copied())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "requested protocol(s) are not supported: [{}]; supports [{}]",
                offered.join(" "),
                PROTOCOLS.join(" ")
            )
        })
}

/// How channel bytes travel in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    /// Binary messages, channel byte first.
    Binary,
    /// Text messages, channel digit first, payload base64.
    Base64,
}

impl Codec {
    fn of(protocol: Option<&str>) -> Self {
        if protocol.is_some_and(|p| p.contains("base64.")) {
            Self::Base64
        } else {
            Self::Binary
        }
    }

    fn encode(self, channel: u8, data: &[u8]) -> Message {
        match self {
            Self::Binary => {
                let mut frame = Vec::with_capacity(data.len() + 1);
                frame.push(channel);
                frame.extend_from_slice(data);
                Message::Binary(frame.into())
            }
            Self::Base64 => {
                let text = format!("{}{}", char::from(b'0' + channel), STANDARD.encode(data));
                Message::Text(text.into())
            }
        }
    }

    /// The channel and payload of a client message; `None` for control frames, empty
    /// messages and undecodable base64 (the kubelet logs and drops those).
    fn decode(self, message: Message) -> Option<(u8, Bytes)> {
        let raw: Bytes = match message {
            Message::Binary(data) => data,
            Message::Text(text) => Bytes::copy_from_slice(text.as_str().as_bytes()),
            _ => return None,
        };
        self.decode_raw(raw)
    }

    /// [`Codec::decode`] of a data message's bytes.
    fn decode_raw(self, raw: Bytes) -> Option<(u8, Bytes)> {
        let (&first, rest) = raw.split_first()?;
        match self {
            Self::Binary => Some((first, raw.slice(1..))),
            Self::Base64 => {
                let channel = first.checked_sub(b'0')?;
                match STANDARD.decode(rest) {
                    Ok(data) => Some((channel, data.into())),
                    Err(error) => {
                        debug!(%error, channel, "undecodable base64 message dropped");
                        None
                    }
                }
            }
        }
    }
}

/// The channel and payload of a client's data message `raw` (binary, or the bytes of a text
/// message) under the negotiated subprotocol `protocol`: the channel byte first, or with a
/// `base64.` protocol a channel digit and base64. `None` for an empty message or
/// undecodable base64, which the kubelet drops. The payload is never longer than `raw`.
pub fn decode_client_message(protocol: Option<&str>, raw: Bytes) -> Option<(u8, Bytes)> {
    Codec::of(protocol).decode_raw(raw)
}

/// Serves one exec or attach in container `container` of `runtime` on an upgraded WebSocket
/// until the process ended and the status is sent, or the client went away.
pub async fn serve<R: StreamingRuntime>(
    socket: WebSocket,
    protocol: Option<&'static str>,
    options: Options,
    kind: Kind,
    runtime: R,
    container: String,
) {
    let codec = Codec::of(protocol);
    let status_protocol = if protocol.is_some_and(|p| p.starts_with("v4.")) {
        Protocol::V4
    } else {
        Protocol::V2
    };
    let (mut sink, mut incoming) = socket.split();
    let (queue, mut outgoing) = mpsc::channel::<Message>(QUEUE_MESSAGES);
    let send = verge_runtime::tasks::spawn("websocket send", async move {
        while let Some(message) = outgoing.recv().await {
            if let Err(error) = sink.send(message).await {
                debug!(%error, "client stopped reading");
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });

    let ready = if options.stdout {
        STDOUT
    } else if options.stderr {
        STDERR
    } else {
        ERROR
    };
    if queue.send(codec.encode(ready, &[])).await.is_err() {
        return;
    }

    let writer = |channel: u8| -> Writer { Box::new(ChannelWriter::new(&queue, codec, channel)) };
    let (stdin_pipe, stdin): (Option<DuplexStream>, Option<Reader>) = pipe(options.stdin);
    let (resize_pipe, resize): (Option<DuplexStream>, Option<Reader>) = pipe(options.tty);
    let mut streams = Streams {
        error: writer(ERROR),
        stdin,
        stdout: options.stdout.then(|| writer(STDOUT)),
        stderr: options.stderr.then(|| writer(STDERR)),
        resize,
        held: Vec::new(),
    };
    drop(queue);

    let (gone_tx, gone) = oneshot::channel::<()>();
    let receive = verge_runtime::tasks::spawn("websocket receive", async move {
        let (mut stdin_pipe, mut resize_pipe) = (stdin_pipe, resize_pipe);
        while let Some(Ok(message)) = incoming.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
            let Some((channel, data)) = codec.decode(message) else {
                continue;
            };
            let target = match channel {
                STDIN => &mut stdin_pipe,
                RESIZE => &mut resize_pipe,
                _ => continue,
            };
            if let Some(pipe) = target
                && pipe.write_all(&data).await.is_err()
            {
                *target = None;
            }
        }
        // Dropping the pipes ends stdin and resize; the client is gone.
        let _ = gone_tx.send(());
    });

    let run = super::process::run(kind, &runtime, &container, &options, &mut streams);
    let outcome = tokio::select! {
        outcome = run => Some(outcome),
        _ = gone, if kind == Kind::Attach => None,
    };
    if let Some(outcome) = outcome {
        super::serve::send_status(&mut streams, &outcome, status_protocol).await;
    }
    drop(streams);
    let _ = send.await;
    receive.abort();
}

/// A client-bound channel: a duplex pipe's far end for the server side, and its near end
/// (boxed) for [`Streams`].
fn pipe(wanted: bool) -> (Option<DuplexStream>, Option<Reader>) {
    if !wanted {
        return (None, None);
    }
    let (writer, reader) = tokio::io::duplex(PIPE_BYTES);
    (Some(writer), Some(Box::new(reader)))
}

/// Writes one channel's bytes as messages into the WebSocket's send queue, in order with the
/// other channels' (one queue for all, as the kubelet writes each frame straight to the
/// socket). Shutting it down or dropping it releases its place in the queue; the socket
/// closes once every channel is released.
struct ChannelWriter {
    queue: Option<PollSender<Message>>,
    codec: Codec,
    channel: u8,
}

impl ChannelWriter {
    fn new(queue: &mpsc::Sender<Message>, codec: Codec, channel: u8) -> Self {
        Self {
            queue: Some(PollSender::new(queue.clone())),
            codec,
            channel,
        }
    }
}

impl AsyncWrite for ChannelWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let Some(queue) = this.queue.as_mut() else {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        };
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match queue.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
            Poll::Ready(Ok(())) => {
                let message = this.codec.encode(this.channel, buf);
                match queue.send_item(message) {
                    Ok(()) => Poll::Ready(Ok(buf.len())),
                    Err(_) => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().queue = None;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn an_upgrade_needs_both_headers() {
        assert!(requested(&headers(&[
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
        ])));
        assert!(!requested(&headers(&[("upgrade", "websocket")])));
        assert!(!requested(&headers(&[
            ("upgrade", "SPDY/3.1"),
            ("connection", "Upgrade"),
        ])));
    }

    #[test]
    fn the_clients_first_served_protocol_wins() {
        assert_eq!(choose(&headers(&[])), Ok(None));
        assert_eq!(
            choose(&headers(&[(
                "sec-websocket-protocol",
                "v5.channel.k8s.io, base64.channel.k8s.io, v4.channel.k8s.io"
            )])),
            Ok(Some("base64.channel.k8s.io"))
        );
        let refused = choose(&headers(&[("sec-websocket-protocol", "v5.channel.k8s.io")]))
            .expect_err("v5 is the API server's");
        assert!(
            refused.starts_with("requested protocol(s) are not supported: [v5.channel.k8s.io]")
        );
    }

    #[test]
    fn binary_frames_lead_with_the_channel_byte() {
        let codec = Codec::of(Some("channel.k8s.io"));
        let Message::Binary(frame) = codec.encode(STDOUT, b"hi") else {
            panic!("binary expected");
        };
        assert_eq!(&frame[..], b"\x01hi");
        let (channel, data) = codec
            .decode(Message::Binary(Bytes::from_static(b"\x00in")))
            .expect("stdin frame");
        assert_eq!((channel, &data[..]), (STDIN, &b"in"[..]));
        assert!(codec.decode(Message::Binary(Bytes::new())).is_none());
    }

    #[test]
    fn base64_frames_lead_with_the_channel_digit() {
        let codec = Codec::of(Some("v4.base64.channel.k8s.io"));
        let Message::Text(text) = codec.encode(STDERR, b"foo\n") else {
            panic!("text expected");
        };
        assert_eq!(text.as_str(), "2Zm9vCg==");
        let (channel, data) = codec
            .decode(Message::Text("0Zm9vCg==".into()))
            .expect("stdin frame");
        assert_eq!((channel, &data[..]), (STDIN, &b"foo\n"[..]));
        assert!(codec.decode(Message::Text("0!!".into())).is_none());
    }

    #[tokio::test]
    async fn channel_writers_share_one_ordered_queue() {
        let (queue, mut outgoing) = mpsc::channel(4);
        let codec = Codec::Binary;
        let mut out = ChannelWriter::new(&queue, codec, STDOUT);
        let mut err = ChannelWriter::new(&queue, codec, ERROR);
        drop(queue);
        out.write_all(b"a").await.expect("write");
        err.write_all(b"b").await.expect("write");
        out.shutdown().await.expect("shutdown");
        assert!(out.write_all(b"late").await.is_err(), "shut down");
        drop(err);
        let mut frames = Vec::new();
        while let Some(Message::Binary(frame)) = outgoing.recv().await {
            frames.push(frame.to_vec());
        }
        assert_eq!(frames, [b"\x01a".to_vec(), b"\x03b".to_vec()]);
    }
}
