//! A server-side SPDY/3.1 session over one upgraded connection: a reader task that decodes
//! frames and routes them to streams, and a writer task that sends control frames (SYN_REPLY,
//! RST_STREAM, PING replies, GOAWAY) ahead of queued DATA.
//!
//! Follows moby/spdystream's behaviour toward Kubernetes clients: no flow control (received
//! SETTINGS and WINDOW_UPDATE are ignored and no send window is enforced), PINGs with the
//! client's (odd) parity echoed unchanged, client stream ids odd and increasing. Backpressure
//! is TCP's: each stream buffers at most [`SessionConfig::stream_buffer`] received bytes, and
//! the reader stops reading the connection while a stream's buffer is full.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use super::codec::{MAX_FRAME_PAYLOAD, SpdyCodec};
use super::frame::Frame;
use super::idle::{Activity, DEFAULT_IDLE_TIMEOUT, watchdog};
use super::reader::Reader;
use super::stream::IncomingStream;

/// Limits of a session.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Largest frame payload accepted, in bytes; a larger frame ends the session with
    /// [`Error::FrameTooLarge`](super::Error::FrameTooLarge). Default: the protocol's 16 MiB − 1.
    pub max_frame_payload: usize,
    /// Received bytes buffered per stream before the session stops reading. Default 1 MiB.
    pub stream_buffer: usize,
    /// DATA frames queued for sending before stream writers wait. Default 64.
    pub send_queue: usize,
    /// A session without a frame read or written for this long is closed. Default 4 h
    /// (the kubelet's `streamingConnectionIdleTimeout`); `None`: never.
    pub idle_timeout: Option<Duration>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_frame_payload: MAX_FRAME_PAYLOAD,
            stream_buffer: 1024 * 1024,
            send_queue: 64,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// What the writer task is asked to do.
#[derive(Debug)]
pub(crate) enum WriteCmd {
    Frame(Frame),
    /// Flush, shut the connection's write side down, then acknowledge.
    Close(oneshot::Sender<()>),
}

/// The queues toward the writer task.
#[derive(Debug, Clone)]
pub(crate) struct Outbound {
    /// Control frames: written before queued DATA.
    pub(crate) control: mpsc::UnboundedSender<WriteCmd>,
    /// DATA frames and GOAWAY, in order, bounded.
    pub(crate) data: mpsc::Sender<WriteCmd>,
}

impl Outbound {
    /// Queues a control frame (dropped if the session is gone).
    pub(crate) fn control(&self, frame: Frame) {
        let _ = self.control.send(WriteCmd::Frame(frame));
    }
}

/// One SPDY/3.1 session, server side. Dropping it stops both tasks.
#[derive(Debug)]
pub struct Session {
    incoming: mpsc::Receiver<IncomingStream>,
    handle: SessionHandle,
    _stop: DropGuard,
}

/// Cheap handle to close a session or wait for the client to close it.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    out: Outbound,
    peer_closed: CancellationToken,
    last_stream: Arc<AtomicU32>,
}

impl Session {
    /// Starts a session on `io` (the connection after the `101 Switching Protocols`).
    pub fn new<T>(io: T, config: SessionConfig) -> Self
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        let stop = CancellationToken::new();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (data_tx, data_rx) = mpsc::channel(config.send_queue.max(1));
        let out = Outbound {
            control: control_tx,
            data: data_tx,
        };
        let (incoming_tx, incoming) = mpsc::channel(16);
        let handle = SessionHandle {
            out: out.clone(),
            peer_closed: CancellationToken::new(),
            last_stream: Arc::new(AtomicU32::new(0)),
        };
        let activity = Activity::new();
        if let Some(timeout) = config.idle_timeout {
            verge_runtime::tasks::spawn(
                "spdy watchdog",
                watchdog(Arc::clone(&activity), timeout, stop.clone()),
            );
        }
        let writer = FramedWrite::new(write, SpdyCodec::new(config.max_frame_payload));
        verge_runtime::tasks::spawn(
            "spdy writer",
            write_loop(
                writer,
                control_rx,
                data_rx,
                Arc::clone(&activity),
                stop.clone(),
            ),
        );
        let reader = Reader {
            frames: FramedRead::new(read, SpdyCodec::new(config.max_frame_payload)),
            streams: HashMap::new(),
            incoming: incoming_tx,
            out,
            config,
            last_stream: Arc::clone(&handle.last_stream),
            activity,
        };
        let peer_closed = handle.peer_closed.clone();
        let reader_stop = stop.clone();
        verge_runtime::tasks::spawn("spdy reader", async move {
            tokio::select! {
                () = reader.run() => {}
                () = reader_stop.cancelled() => {}
            }
            peer_closed.cancel();
        });
        Self {
            incoming,
            handle,
            _stop: stop.drop_guard(),
        }
    }

    /// The next stream the client opens; `None` once the client closed the connection.
    pub async fn next_stream(&mut self) -> Option<IncomingStream> {
        self.incoming.recv().await
    }

    /// A handle for closing the session.
    pub fn handle(&self) -> SessionHandle {
        self.handle.clone()
    }
}

impl SessionHandle {
    /// Sends GOAWAY (OK, last stream = the newest the client opened), flushes everything
    /// queued before it and shuts the connection's write side down. Returns once done, or
    /// at once if the session is gone.
    pub async fn close(&self) {
        let goaway = Frame::GoAway {
            last_good_stream_id: self.last_stream.load(Ordering::Relaxed),
            status: 0,
        };
        if self.out.data.send(WriteCmd::Frame(goaway)).await.is_err() {
            return;
        }
        let (ack_tx, ack_rx) = oneshot::channel();
        if self.out.data.send(WriteCmd::Close(ack_tx)).await.is_ok() {
            let _ = ack_rx.await;
        }
    }

    /// Resolves once the client closed the connection (EOF), the connection failed, or the
    /// session was dropped.
    pub async fn closed(&self) {
        self.peer_closed.cancelled().await;
    }
}

/// Writes control frames first, then DATA/GOAWAY in order; flushes when both queues are
/// empty.
async fn write_loop<W>(
    mut sink: FramedWrite<W, SpdyCodec>,
    mut control: mpsc::UnboundedReceiver<WriteCmd>,
    mut data: mpsc::Receiver<WriteCmd>,
    activity: Arc<Activity>,
    stop: CancellationToken,
) where
    W: AsyncWrite + Unpin,
{
    let run = async {
        loop {
            let cmd = tokio::select! {
                biased;
                Some(cmd) = control.recv() => cmd,
                Some(cmd) = data.recv() => cmd,
                else => return Ok(()),
            };
            match cmd {
                WriteCmd::Frame(frame) => {
                    activity.touch();
                    sink.feed(frame).await?;
                }
                WriteCmd::Close(ack) => {
                    sink.flush().await?;
                    sink.get_mut().shutdown().await?;
                    let _ = ack.send(());
                    return Ok(());
                }
            }
            if control.is_empty() && data.is_empty() {
                sink.flush().await?;
            }
        }
    };
    let result: Result<(), super::Error> = tokio::select! {
        result = run => result,
        () = stop.cancelled() => Ok(()),
    };
    if let Err(error) = result {
        debug!(%error, "SPDY session: write failed");
    }
}
