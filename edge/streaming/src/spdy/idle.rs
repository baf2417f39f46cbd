//! The idle timeout of a session (the kubelet's `streamingConnectionIdleTimeout`, default
//! 4 h): every frame read or written counts as activity; a session idle for longer is ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// The kubelet's default `streamingConnectionIdleTimeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// When the session last read or wrote a frame.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    /// Records activity now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

/// Cancels `stop` once the session has been idle for `timeout`.
pub(crate) async fn watchdog(activity: Arc<Activity>, timeout: Duration, stop: CancellationToken) {
    loop {
        let idle = activity.idle_for();
        if idle >= timeout {
            debug!(?timeout, "SPDY session idle too long; closing it");
            stop.cancel();
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(timeout - idle) => {}
            () = stop.cancelled() => return,
        }
    }
}
