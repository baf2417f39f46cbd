//! The session's reader task: decodes the client's frames and routes them to streams.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::codec::FramedRead;
use tracing::debug;

use super::codec::SpdyCodec;
use super::frame::{FLAG_FIN, Frame, Headers, RstStatus};
use super::idle::Activity;
use super::session::{Outbound, SessionConfig, WriteCmd};
use super::stream::{Chunk, IncomingStream, Shared};

/// A stream as the reader task tracks it.
pub(crate) struct Entry {
    /// `None` once the client sent FIN.
    tx: Option<mpsc::UnboundedSender<Chunk>>,
    budget: Arc<Semaphore>,
    shared: Arc<Shared>,
}

pub(crate) struct Reader<R> {
    pub(crate) frames: FramedRead<R, SpdyCodec>,
    pub(crate) streams: HashMap<u32, Entry>,
    pub(crate) incoming: mpsc::Sender<IncomingStream>,
    pub(crate) out: Outbound,
    pub(crate) config: SessionConfig,
    pub(crate) last_stream: Arc<AtomicU32>,
    pub(crate) activity: Arc<Activity>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// Reads until EOF, a bad frame (answered with GOAWAY PROTOCOL_ERROR) or an I/O error.
    pub(crate) async fn run(mut self) {
        while let Some(frame) = self.frames.next().await {
            self.activity.touch();
            match frame {
                Ok(frame) => self.handle(frame).await,
                Err(error) => {
                    debug!(%error, "SPDY session: bad frame, sending GOAWAY");
                    let _ = self
                        .out
                        .data
                        .send(WriteCmd::Frame(Frame::GoAway {
                            last_good_stream_id: self.last_stream.load(Ordering::Relaxed),
                            status: 1,
                        }))
                        .await;
                    break;
                }
            }
        }
        for entry in self.streams.values() {
            entry.shared.reset.store(true, Ordering::Relaxed);
        }
    }

    async fn handle(&mut self, frame: Frame) {
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => self.open(stream_id, flags, headers).await,
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                let Some(entry) = self.streams.get_mut(&stream_id) else {
                    return; // a stream already closed or reset: dropped, as spdystream does
                };
                if let (false, Some(tx)) = (data.is_empty(), &entry.tx) {
                    let want = data.len().clamp(1, self.config.stream_buffer.max(1));
                    let permits = u32::try_from(want).unwrap_or(u32::MAX);
                    if let Ok(permit) = Arc::clone(&entry.budget).acquire_many_owned(permits).await
                    {
                        let _ = tx.send(Chunk::Data(data, permit));
                    }
                }
                if fin {
                    entry.tx = None;
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some(entry) = self.streams.remove(&stream_id) {
                    entry.shared.reset.store(true, Ordering::Relaxed);
                    if let Some(tx) = entry.tx {
                        let _ = tx.send(Chunk::Reset);
                    }
                }
            }
            Frame::Ping { id } if id % 2 == 1 => self.out.control(Frame::Ping { id }),
            Frame::GoAway { .. } => debug!("SPDY session: client sent GOAWAY"),
            // Replies to our pings (we send none), SETTINGS, WINDOW_UPDATE (no flow control),
            // HEADERS (nothing uses them), SYN_REPLY (we open no streams), unknown types.
            _ => {}
        }
    }

    async fn open(&mut self, stream_id: u32, flags: u8, headers: Headers) {
        let last = self.last_stream.load(Ordering::Relaxed);
        if stream_id.is_multiple_of(2) || stream_id <= last {
            self.out.control(Frame::RstStream {
                stream_id,
                status: RstStatus::ProtocolError,
            });
            return;
        }
        self.last_stream.store(stream_id, Ordering::Relaxed);
        // Forget streams finished both ways (a dropped reader counts as finished receiving).
        self.streams.retain(|_, e| {
            let receiving = e.tx.as_ref().is_some_and(|tx| !tx.is_closed());
            receiving || !e.shared.local_done.load(Ordering::Relaxed)
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Shared::new();
        let budget = Arc::new(Semaphore::new(self.config.stream_buffer.max(1)));
        self.streams.insert(
            stream_id,
            Entry {
                tx: (flags & FLAG_FIN == 0).then_some(tx),
                budget,
                shared: Arc::clone(&shared),
            },
        );
        let stream = IncomingStream {
            id: stream_id,
            headers,
            rx,
            shared,
            out: self.out.clone(),
        };
        if let Err(refused) = self.incoming.send(stream).await {
            refused.0.reject(RstStatus::RefusedStream);
        }
    }
}
