//! One SPDY stream as the handlers see it: an [`IncomingStream`] to accept (SYN_REPLY) or
//! reject (RST_STREAM), then a [`StreamReader`] (`AsyncRead`, EOF at the peer's FIN) and a
//! [`StreamWriter`] (`AsyncWrite`, FIN on shutdown, RST_STREAM CANCEL when dropped unfinished).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::PollSender;

use super::frame::{Frame, Headers, RstStatus};
use super::session::{Outbound, WriteCmd};

/// Largest DATA payload this server writes in one frame (what Go's `io.Copy` writes too).
pub const MAX_DATA_FRAME: usize = 32 * 1024;

/// What the session's reader hands a stream's reader.
#[derive(Debug)]
pub(crate) enum Chunk {
    /// Bytes, holding their share of the stream's buffer budget until read.
    Data(Bytes, OwnedSemaphorePermit),
    /// The peer reset the stream.
    Reset,
}

/// State shared by the session's reader and a stream's halves.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The peer reset the stream (RST_STREAM), or the session ended.
    pub(crate) reset: AtomicBool,
    /// This side finished writing (FIN or RST sent).
    pub(crate) local_done: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            reset: AtomicBool::new(false),
            local_done: AtomicBool::new(false),
        })
    }
}

/// A stream the client opened, waiting to be accepted or rejected.
#[derive(Debug)]
pub struct IncomingStream {
    pub(crate) id: u32,
    pub(crate) headers: Headers,
    pub(crate) rx: mpsc::UnboundedReceiver<Chunk>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) out: Outbound,
}

impl IncomingStream {
    /// The stream id (odd: opened by the client).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The SYN_STREAM headers (`streamtype`, `port`, `requestid`, ...).
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Accepts the stream: queues a SYN_REPLY with an empty header block, as a kubelet does.
    /// The client-go side waits for it (30 s) before opening its next stream.
    pub fn accept(self) -> Stream {
        self.out.control(Frame::SynReply {
            stream_id: self.id,
            fin: false,
            headers: Headers::default(),
        });
        Stream {
            id: self.id,
            reader: StreamReader {
                rx: self.rx,
                current: None,
                shared: Arc::clone(&self.shared),
            },
            writer: StreamWriter {
                id: self.id,
                tx: PollSender::new(self.out.data.clone()),
                out: self.out,
                shared: self.shared,
                finished: false,
            },
        }
    }

    /// Rejects the stream with RST_STREAM and no SYN_REPLY.
    pub fn reject(self, status: RstStatus) {
        self.shared.local_done.store(true, Ordering::Relaxed);
        self.out.control(Frame::RstStream {
            stream_id: self.id,
            status,
        });
    }
}

/// An accepted stream.
#[derive(Debug)]
pub struct Stream {
    id: u32,
    /// Bytes from the client.
    pub reader: StreamReader,
    /// Bytes to the client.
    pub writer: StreamWriter,
}

impl Stream {
    /// The stream id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The two halves.
    pub fn split(self) -> (StreamReader, StreamWriter) {
        (self.reader, self.writer)
    }
}

/// The receiving half: the client's DATA frames; EOF after its FIN (or when the session
/// ends), `ConnectionReset` after its RST_STREAM.
#[derive(Debug)]
pub struct StreamReader {
    rx: mpsc::UnboundedReceiver<Chunk>,
    current: Option<(Bytes, OwnedSemaphorePermit)>,
    shared: Arc<Shared>,
}

impl StreamReader {
    /// Whether the client reset the stream.
    pub fn is_reset(&self) -> bool {
        self.shared.reset.load(Ordering::Relaxed)
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if let Some((bytes, _permit)) = &mut self.current {
                if !bytes.is_empty() {
                    let n = bytes.len().min(buf.remaining());
                    buf.put_slice(&bytes[..n]);
                    bytes.advance(n);
                    if bytes.is_empty() {
                        self.current = None;
                    }
                    return Poll::Ready(Ok(()));
                }
                self.current = None;
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(Chunk::Data(bytes, permit)) => self.current = Some((bytes, permit)),
                Some(Chunk::Reset) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "stream reset by the client",
                    )));
                }
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// The sending half. Writes become DATA frames of at most [`MAX_DATA_FRAME`] bytes, queued
/// in order; `shutdown` sends DATA+FIN; dropping it before `shutdown` resets the stream.
#[derive(Debug)]
pub struct StreamWriter {
    id: u32,
    tx: PollSender<WriteCmd>,
    out: Outbound,
    shared: Arc<Shared>,
    finished: bool,
}

impl StreamWriter {
    /// Resets the stream (RST_STREAM CANCEL), as moby/spdystream's `Reset` does.
    pub fn reset(mut self) {
        self.send_reset();
    }

    fn send_reset(&mut self) {
        if !self.finished {
            self.finished = true;
            self.shared.local_done.store(true, Ordering::Relaxed);
            self.out.control(Frame::RstStream {
                stream_id: self.id,
                status: RstStatus::Cancel,
            });
        }
    }

    fn closed() -> io::Error {
        io::Error::new(io::ErrorKind::BrokenPipe, "SPDY session closed")
    }
}

impl AsyncWrite for StreamWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.shared.reset.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "stream reset by the client",
            )));
        }
        if self.finished {
            return Poll::Ready(Err(Self::closed()));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| Self::closed())?;
        let n = buf.len().min(MAX_DATA_FRAME);
        let frame = Frame::Data {
            stream_id: self.id,
            fin: false,
            data: Bytes::copy_from_slice(&buf[..n]),
        };
        self.tx
            .send_item(WriteCmd::Frame(frame))
            .map_err(|_| Self::closed())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The session's writer flushes whenever its queues run empty.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.finished {
            return Poll::Ready(Ok(()));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| Self::closed())?;
        let frame = Frame::Data {
            stream_id: self.id,
            fin: true,
            data: Bytes::new(),
        };
        self.tx
            .send_item(WriteCmd::Frame(frame))
            .map_err(|_| Self::closed())?;
        self.finished = true;
        self.shared.local_done.store(true, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

impl Drop for StreamWriter {
    fn drop(&mut self) {
        if !self.shared.reset.load(Ordering::Relaxed) {
            self.send_reset();
        }
    }
}
