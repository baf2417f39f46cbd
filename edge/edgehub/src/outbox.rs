//! The upstream outbox's configuration and its writing end, `Outbox` (architecture.md §3.3). The
//! entries live in the [`MetaStore`]; edgehub's drain sends them (module docs of
//! [`crate`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::warn;
use verge_core::Envelope;
use verge_runtime::ErrorChain;

use super::try_send;
use crate::error::Result;
use verge_edge_store::{MetaStore, OutboxEntry, OutboxLimits};

/// A report handed to [`Outbox::try_put`], waiting for the writer task.
pub(crate) type Queued = Envelope;

/// Bounds and retry policy of the upstream outbox (YAML `edgeHub.outbox:`); every field optional.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct OutboxConfig {
    /// Most entries kept. When it is reached, reports with a new *event* key are refused
    /// ([`OutboxFull`](verge_edge_store::Error::OutboxFull), logged); statuses and deletions are always kept (they
    /// are bounded by the number of pods). Default 10000.
    pub max_entries: usize,
    /// Most bytes the waiting reports of one droppable source hold: edged's events, and each
    /// third-party group's apps (`app/<group>`). Beyond it that source's new reports are
    /// refused ([`OutboxSourceFull`](verge_edge_store::Error::OutboxSourceFull), logged), so
    /// one app group's flood while the link is down cannot crowd out events or other groups.
    /// Default 64 MiB (`67108864`).
    pub max_source_bytes: u64,
    /// Most reports sent and not yet answered, per session. Default 64.
    pub max_inflight: usize,
    /// A report refused this many times by a controller (`error` answers, e.g. a 4xx
    /// "forbidden"/"not found" for a deleted pod) is dropped with an error log. Routing
    /// errors from cloudhub itself (no controller attached) are retried without counting.
    /// Default 10.
    pub max_attempts: u32,
    /// Delay before resending a refused report; doubles per counted refusal up to
    /// `retryMaxBackoff`. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// Largest delay before resending a refused report. Default `1m`.
    #[serde(with = "humantime_serde")]
    pub retry_max_backoff: Duration,
    /// A report not answered within this time is sent again (same id) in the same session.
    /// Default `30s`.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_source_bytes: 64 << 20,
            max_inflight: 64,
            max_attempts: 10,
            retry_backoff: Duration::from_secs(1),
            retry_max_backoff: Duration::from_secs(60),
            ack_timeout: Duration::from_secs(30),
        }
    }
}

impl OutboxConfig {
    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// The name of the first bad field and what is wrong with it.
    pub fn validate(&self) -> std::result::Result<(), (&'static str, &'static str)> {
        if self.max_entries == 0 {
            return Err(("edgeHub.outbox.maxEntries", "must hold at least one entry"));
        }
        if self.max_source_bytes == 0 {
            return Err((
                "edgeHub.outbox.maxSourceBytes",
                "must hold at least one report",
            ));
        }
        if self.max_inflight == 0 {
            return Err((
                "edgeHub.outbox.maxInflight",
                "must allow at least one message",
            ));
        }
        if self.max_attempts == 0 {
            return Err((
                "edgeHub.outbox.maxAttempts",
                "must allow at least one attempt",
            ));
        }
        if self.retry_backoff.is_zero() || self.ack_timeout.is_zero() {
            return Err((
                "edgeHub.outbox.retryBackoff",
                "delays must be greater than zero",
            ));
        }
        if self.retry_max_backoff < self.retry_backoff {
            return Err((
                "edgeHub.outbox.retryMaxBackoff",
                "must be at least retryBackoff",
            ));
        }
        Ok(())
    }

    /// The delay before resending a report refused `attempts` times (at least once).
    pub(crate) fn retry_delay(&self, attempts: u32) -> Duration {
        verge_runtime::backoff::doubled(
            self.retry_backoff,
            self.retry_max_backoff,
            attempts.saturating_sub(1),
        )
    }
}

/// Writes durable reports into the outbox and wakes the drain; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    store: MetaStore,
    wake: Arc<Notify>,
    limits: OutboxLimits,
    queue: mpsc::Sender<Queued>,
}

impl Outbox {
    /// An outbox over `store` bounded by `limits` (droppable entries, bytes per source), and the
    /// receiving end of [`Outbox::try_put`]'s queue (`queue` reports), for
    /// [`Outbox::write_queued`].
    pub(crate) fn new(
        store: MetaStore,
        limits: OutboxLimits,
        queue: usize,
    ) -> (Self, mpsc::Receiver<Queued>) {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let outbox = Self {
            store,
            wake: Arc::new(Notify::new()),
            limits,
            queue: tx,
        };
        (outbox, rx)
    }

    /// Queues a report for [`Outbox::write_queued`] without waiting (for callers that cannot
    /// await); it is committed shortly after, in queue order.
    ///
    /// # Errors
    /// [`QueueFull`](crate::error::Error::QueueFull) when the queue is full; [`HubStopped`](crate::error::Error::HubStopped) once
    /// the writer has stopped.
    pub(crate) fn try_put(&self, msg: Envelope) -> Result<()> {
        try_send(&self.queue, msg)
    }

    /// Commits queued reports in order until `shutdown`, then the ones still queued.
    pub(crate) async fn write_queued(
        self,
        mut queued: mpsc::Receiver<Queued>,
        shutdown: CancellationToken,
    ) {
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => { queued.close(); queued.recv().await }
                next = queued.recv() => next,
            };
            let Some(msg) = next else { break };
            let report = msg.to_string();
            if let Err(e) = self.put(msg).await {
                warn!(%report, error = %ErrorChain(&e), "queued report not stored");
            }
        }
    }

    /// Completes after the next put (or at once if one happened since the last wait); the
    /// drain waits on it.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// Runs `write` in one transaction of `store` and commits the reports it returns to the
    /// outbox in the same transaction, then wakes the drain
    /// ([`EdgeHubHandle::report_with`](crate::EdgeHubHandle::report_with)).
    pub(crate) async fn put_with<T, E, F>(&self, store: &MetaStore, write: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<verge_edge_store::Error> + Send + 'static,
        F: FnOnce(&verge_edge_store::Transaction<'_>) -> Result<(T, Vec<Envelope>), E>
            + Send
            + 'static,
    {
        let max = self.limits;
        let (out, reported) = store
            .blocking(move |s| {
                s.write(|txn| {
                    let (out, reports) = write(txn)?;
                    for msg in &reports {
                        txn.outbox_put(msg, &verge_proto::envelope::encode(msg), max)?;
                    }
                    Ok::<_, E>((out, !reports.is_empty()))
                })
            })
            .await?;
        if reported {
            self.wake.notify_one();
        }
        Ok(out)
    }

    /// Commits `msg` under its key (replacing that key's entry), then wakes the drain.
    pub(crate) async fn put(&self, msg: Envelope) -> Result<()> {
        let max = self.limits;
        self.store
            .blocking(move |s| s.outbox_put(&msg, &verge_proto::envelope::encode(&msg), max))
            .await?;
        self.wake.notify_one();
        Ok(())
    }
}

/// The report an outbox entry holds, decoded from its wire encoding.
///
/// # Errors
/// [`OutboxRecord`](crate::error::Error::OutboxRecord) when the stored bytes do not
/// decode (corrupted, or written by an incompatible version).
pub fn message(entry: &OutboxEntry) -> Result<Envelope> {
    verge_proto::envelope::decode(&entry.wire).map_err(|source| super::error::Error::OutboxRecord {
        key: entry.key.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let c = OutboxConfig::default();
        let secs: Vec<u64> = [0, 1, 2, 3, 6, 7, 40]
            .into_iter()
            .map(|n| c.retry_delay(n).as_secs())
            .collect();
        assert_eq!(secs, [1, 1, 2, 4, 32, 60, 60]);
    }
}
