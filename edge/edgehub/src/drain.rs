//! Draining the outbox during one session: send entries in FIFO order with at most
//! `max_inflight` unanswered, delete an entry on the `ack` of the very message it holds,
//! retry refused ones after a backoff, resend unanswered ones after `ack_timeout`.
//!
//! State is per session (a reconnect starts a fresh [`Drain`] at the start of the outbox, so
//! everything still stored is sent again). A report is always sent as the *current* entry of
//! its key: a newer report of a key whose older one is in flight is sent too (after it, on
//! the same ordered stream); the older one's ack then removes nothing, and its `error` is
//! not retried.

use std::collections::{BTreeSet, HashMap, VecDeque};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{Instrument as _, debug, error, warn};
use verge_core::{Envelope, Kind, Module, Outcome};
use verge_proto::hub::EdgeFrame;

use super::outbox::OutboxConfig;
use super::session::send;
use crate::error::Result;
use verge_edge_store::{MetaStore, OutboxEntry};

/// A report sent and not yet answered.
#[derive(Debug)]
struct Inflight {
    key: String,
    deadline: Instant,
}

/// The outbox drain of one session; see the module docs.
#[derive(Debug)]
pub(super) struct Drain {
    store: MetaStore,
    config: OutboxConfig,
    /// The seq of the last entry read in order; `None` before the first.
    cursor: Option<u64>,
    /// By message id.
    inflight: HashMap<String, Inflight>,
    /// Keys to send again (retry or ack timeout due), before newer entries.
    ready: VecDeque<String>,
    /// Refused keys waiting for their retry time.
    retries: BTreeSet<(Instant, String)>,
}

impl Drain {
    /// A drain starting at the oldest entry.
    pub(super) fn new(store: MetaStore, config: OutboxConfig) -> Self {
        Self {
            store,
            config,
            cursor: None,
            inflight: HashMap::new(),
            ready: VecDeque::new(),
            retries: BTreeSet::new(),
        }
    }

    /// When [`Drain::on_timer`] has work: the earliest retry or ack deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let retry = self.retries.first().map(|(at, _)| *at);
        let ack = self.inflight.values().map(|i| i.deadline).min();
        retry.into_iter().chain(ack).min()
    }

    /// Sends entries until `max_inflight` are unanswered or nothing is left to send.
    ///
    /// # Errors
    /// [`StreamClosed`](crate::error::Error::StreamClosed) if the stream is gone; store failures.
    pub(super) async fn fill(&mut self, frames: &mpsc::Sender<EdgeFrame>) -> Result<()> {
        while self.inflight.len() < self.config.max_inflight {
            let batch = if let Some(key) = self.ready.pop_front() {
                let entry = self.store.blocking(move |s| s.outbox_get(&key)).await?;
                entry.into_iter().collect()
            } else {
                let (cursor, free) = (self.cursor, self.config.max_inflight - self.inflight.len());
                let batch = self
                    .store
                    .blocking(move |s| s.outbox_after(cursor, free))
                    .await?;
                match batch.last() {
                    None => return Ok(()),
                    Some(last) => self.cursor = Some(last.seq),
                }
                batch
            };
            for entry in batch {
                self.send(entry, frames).await?;
            }
        }
        Ok(())
    }

    async fn send(&mut self, entry: OutboxEntry, frames: &mpsc::Sender<EdgeFrame>) -> Result<()> {
        let id = entry.id.clone();
        if self.inflight.contains_key(&id) {
            return Ok(());
        }
        debug!(key = %entry.key, %id, attempts = entry.attempts, "sending outbox report");
        let deadline = Instant::now() + self.config.ack_timeout;
        // The report continues the trace it was made in (stored with it in the outbox, so
        // across restarts and partitions); the cloud's spans become children of this send.
        let mut message = super::outbox::message(&entry)?;
        let span = verge_telemetry::propagation::continued(&message.trace, || {
            verge_telemetry::span!(
                "edgehub.send",
                verge.message.id = %id,
                verge.resource = %message.path(),
                verge.operation = %message.operation(),
                verge.refused = entry.attempts,
            )
        });
        let traced = verge_telemetry::propagation::inject(&span);
        if !traced.is_empty() {
            message.trace = traced;
        }
        self.inflight.insert(
            id,
            Inflight {
                key: entry.key,
                deadline,
            },
        );
        send(frames, message).instrument(span).await
    }

    /// Takes `msg` if it answers (`ack` or `error`) a report in flight; returns it back
    /// otherwise, for metamanager.
    ///
    /// # Errors
    /// Store failures.
    pub(super) async fn answer(&mut self, msg: Envelope) -> Result<Option<Envelope>> {
        let (id, reason) = match &msg.kind {
            Kind::Answer {
                to,
                outcome: Outcome::Ack,
                ..
            } => (to.to_string(), None),
            Kind::Answer {
                to,
                outcome: Outcome::Error(reason),
                ..
            } => (to.to_string(), Some(reason.clone())),
            _ => return Ok(Some(msg)),
        };
        let Some(Inflight { key, .. }) = self.inflight.remove(&id) else {
            return Ok(Some(msg));
        };
        let Some(reason) = reason else {
            let (k, i) = (key.clone(), id.clone());
            let removed = self
                .store
                .blocking(move |s| s.outbox_remove_if(&k, &i))
                .await?;
            debug!(%key, %id, removed, "outbox report acked");
            return Ok(None);
        };
        // Routing errors of cloudhub itself (no controller attached) do not count.
        let count = msg.source != Module::CloudHub;
        let (k, i) = (key.clone(), id.clone());
        let refused = self
            .store
            .blocking(move |s| s.outbox_refused(&k, &i, count))
            .await?;
        match refused {
            None => debug!(%key, %id, %reason, "superseded outbox report refused"),
            Some(attempts) if attempts >= self.config.max_attempts => {
                error!(%key, %id, attempts, %reason, "outbox report refused too often; dropped");
                let (k, i) = (key.clone(), id);
                self.store
                    .blocking(move |s| s.outbox_remove_if(&k, &i))
                    .await?;
            }
            Some(attempts) => {
                let delay = self.config.retry_delay(attempts.max(1));
                warn!(%key, %id, attempts, ?delay, %reason, "outbox report refused; will retry");
                self.retries.insert((Instant::now() + delay, key));
            }
        }
        Ok(None)
    }

    /// Queues due retries and reports unanswered past `ack_timeout` for sending.
    pub(super) fn on_timer(&mut self, now: Instant) {
        while let Some((at, _)) = self.retries.first() {
            if *at > now {
                break;
            }
            if let Some((_, key)) = self.retries.pop_first() {
                self.ready.push_back(key);
            }
        }
        for (id, i) in self.inflight.extract_if(|_, i| i.deadline <= now) {
            warn!(key = %i.key, %id, timeout = ?self.config.ack_timeout, "outbox report not answered; resending");
            self.ready.push_back(i.key);
        }
    }
}
