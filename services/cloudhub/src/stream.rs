//! The outbound half of a stream: a bounded queue of frames that ends, at most once, with the
//! reason the stream was closed.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::Error;

/// The response stream of `EdgeHub.Connect` and `ControllerHub.Attach`.
pub type FrameStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// How a stream ends: the first call to [`StreamEnd::finish`] wins, records the reason and
/// wakes both the outbound stream (which sends the reason as the final status) and the task
/// reading the inbound half.
#[derive(Debug, Default)]
pub(crate) struct StreamEnd {
    token: CancellationToken,
    reason: Mutex<Option<Error>>,
}

impl StreamEnd {
    /// A stream that has not ended.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Ends the stream; `None` ends it with status OK. Later calls are ignored.
    pub(crate) fn finish(&self, reason: Option<Error>) {
        let mut slot = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if self.token.is_cancelled() {
            return;
        }
        *slot = reason;
        self.token.cancel();
    }

    /// Resolves once [`StreamEnd::finish`] was called.
    pub(crate) async fn ended(&self) {
        self.token.cancelled().await;
    }

    fn take_reason(&self) -> Option<Error> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The response stream of `ControllerHub.Attach`: `first` frames, then the frames of two
/// queues written by `write`, until `end` finishes; then the end reason as a gRPC status.
/// With two queues: a frame waiting in `control` is always sent before
/// any waiting in `queue` (session events and delivery errors overtake upstream messages).
/// Ends when `end` finishes or both queues are closed.
pub(crate) fn outbound_prioritized<Q: Send + 'static, T: Send + 'static>(
    first: Vec<T>,
    control: mpsc::Receiver<Q>,
    queue: mpsc::Receiver<Q>,
    end: Arc<StreamEnd>,
    write: fn(Q) -> T,
) -> FrameStream<T> {
    let head = futures::stream::iter(first.into_iter().map(Ok));
    let tail = futures::stream::unfold(Some((control, queue, end)), move |state| async move {
        let (mut control, mut queue, end) = state?;
        tokio::select! {
            biased;
            () = end.ended() => end.take_reason().map(|e| (Err(Status::from(e)), None)),
            Some(frame) = control.recv() => Some((Ok(write(frame)), Some((control, queue, end)))),
            frame = queue.recv() => frame.map(|f| (Ok(write(f)), Some((control, queue, end)))),
        }
    });
    Box::pin(head.chain(tail))
}

/// The response stream of `EdgeHub.Connect`: `first` frames, then everything from `queue`
/// written as a frame by `write` (the one place where typed messages become wire frames),
/// with `control` frames (tunnel requests) overtaking waiting messages, until `end`
/// finishes; then the end reason as a gRPC status (or a clean end). Frames still queued
/// when the stream ends are dropped: the peer resyncs when it reconnects.
pub(crate) fn outbound_with_control<Q: Send + 'static, T: Send + 'static>(
    first: Vec<T>,
    control: mpsc::Receiver<Box<T>>,
    queue: mpsc::Receiver<Q>,
    end: Arc<StreamEnd>,
    write: fn(Q) -> T,
) -> FrameStream<T> {
    let head = futures::stream::iter(first.into_iter().map(Ok));
    let tail = futures::stream::unfold(Some((control, queue, end)), move |state| async move {
        let (mut control, mut queue, end) = state?;
        tokio::select! {
            biased;
            () = end.ended() => end.take_reason().map(|e| (Err(Status::from(e)), None)),
            Some(frame) = control.recv() => Some((Ok(*frame), Some((control, queue, end)))),
            frame = queue.recv() => frame.map(|f| (Ok(write(f)), Some((control, queue, end)))),
        }
    });
    Box::pin(head.chain(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ends_with_first_reason() {
        let (tx, rx) = mpsc::channel(4);
        let (_control, control) = mpsc::channel(1);
        let end = StreamEnd::new();
        let mut s = outbound_with_control(vec![0], control, rx, end.clone(), |q: i32| q);
        tx.send(1).await.expect("open");
        assert_eq!(s.next().await.expect("item").expect("ok"), 0);
        assert_eq!(s.next().await.expect("item").expect("ok"), 1);
        end.finish(Some(Error::Replaced));
        end.finish(Some(Error::ShuttingDown));
        let status = s.next().await.expect("item").expect_err("status");
        assert_eq!(status.code(), tonic::Code::Aborted);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn control_frames_overtake_queued_messages() {
        let (control_tx, control_rx) = mpsc::channel(4);
        let (tx, rx) = mpsc::channel(4);
        let end = StreamEnd::new();
        tx.send(10).await.expect("open");
        tx.send(11).await.expect("open");
        control_tx.send(1).await.expect("open");
        let mut s = outbound_prioritized(vec![0], control_rx, rx, end.clone(), |f| f);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(s.next().await.expect("item").expect("ok"));
        }
        assert_eq!(got, [0, 1, 10, 11]);
        drop(control_tx);
        tx.send(12).await.expect("open");
        assert_eq!(s.next().await.expect("item").expect("ok"), 12);
        end.finish(None);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn clean_end() {
        let (_tx, rx) = mpsc::channel::<u8>(1);
        let (_control, control) = mpsc::channel(1);
        let end = StreamEnd::new();
        let mut s = outbound_with_control(vec![], control, rx, end.clone(), |q: u8| q);
        end.finish(None);
        assert!(s.next().await.is_none());
    }
}
