//! The per-node delivery queue: at-least-once downstream delivery, coalesced by object
//! (architecture.md §3.1 and §3.5). Pure: the caller passes the time in, nothing here does I/O.
//!
//! Messages are of two kinds:
//! - *answers* (`ack`, `response`, `error`, `keepalive`, or no resource): sent first, in
//!   FIFO order, once, never coalesced, never tracked;
//! - *object messages* (every other operation on an edge-side `<ns>/<type>/<name>`): keyed by
//!   that [`ResourceKey`], [`Envelope::delivery_key`], so route and key cannot disagree. Per key at most one message is *in flight* (sent, not answered), so
//!   the edge sees an object's versions in order. A full-state message (`insert`, `update`,
//!   `delete`, `resync`) replaces whatever waits for its key, so only the newest version
//!   waits; `patch` and `query` queue behind it instead. Messages of third-party groups
//!   never replace each other (commands, not states). An in-flight message without an
//!   answer after `ack_timeout` is resent with the same id (the edge is idempotent), at most
//!   `max_retries` times, then dropped and reported by [`DeliveryQueue::expired`].
//!
//! Order is kept per object, not across objects: keys are served in the order they became
//! ready to send.
//!
//! Tracing: a traced object message (one whose `trace_context` is set) gets a
//! `cloudhub.deliver` span from its push until it is answered, replaced, given up or the
//! session ends, so a wait in the queue or for an offline edge is visible; resends are its
//! events and `verge.attempts` (set when it is answered or given up) counts the sends. The message goes out with that span's context.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use verge_core::{Envelope, MessageId, ResourceKey};

#[cfg(test)]
mod tests;
mod trace;

use trace::{DeliverSpan, deliver_span};

/// Who queued a message: the id of the controller attachment it came from, or `None` for
/// answers cloudhub makes itself (keepalive and error replies).
pub(crate) type Origin = Option<u64>;

/// The bounds of one queue (from [`crate::Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Most messages waiting to be sent, answers and objects together (`session_queue_len`).
    pub capacity: usize,
    /// Most object messages sent and not yet answered (`max_inflight`).
    pub max_inflight: usize,
    /// How long an object message may stay unanswered before it is resent (`ack_timeout`).
    pub ack_timeout: Duration,
    /// How often an unanswered message is resent before it is dropped (`max_retries`).
    pub max_retries: u32,
}

/// [`DeliveryQueue::push`] refused a message: `waiting` messages wait already (the capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull {
    /// Messages waiting when the push was refused.
    pub waiting: usize,
}

/// An object message dropped because no answer came after its last attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unacked {
    /// The message's `header.id`.
    pub message_id: String,
    /// Who queued it.
    pub origin: Origin,
    /// How often it was sent (`1 + max_retries`).
    pub attempts: u32,
}

/// A message and who queued it.
#[derive(Debug)]
struct Queued {
    message: Envelope,
    origin: Origin,
    /// `cloudhub.deliver` of a traced object message, else disabled; ends when dropped.
    span: DeliverSpan,
}

/// A sent object message awaiting its answer.
#[derive(Debug)]
struct InFlight {
    key: ResourceKey,
    queued: Queued,
    /// Sends so far.
    attempts: u32,
    /// When to give up waiting for the answer to the last send; `None` while a resend is due.
    deadline: Option<Instant>,
}

/// The downstream queue of one edge session. See the module docs for the rules.
#[derive(Debug)]
pub(crate) struct DeliveryQueue {
    limits: Limits,
    /// Answers, FIFO.
    answers: VecDeque<Queued>,
    /// Object messages not yet sent, per key; never holds an empty list.
    waiting: HashMap<ResourceKey, VecDeque<Queued>>,
    /// Keys with waiting messages and nothing in flight, in the order they became ready.
    ready: VecDeque<ResourceKey>,
    /// `answers` plus every list in `waiting`.
    waiting_len: usize,
    /// Sent object messages by id.
    inflight: HashMap<MessageId, InFlight>,
    /// The id in flight for each key.
    inflight_keys: HashMap<ResourceKey, MessageId>,
    /// Ids whose resend is due (stale ids are skipped).
    due: VecDeque<MessageId>,
    /// Resends scheduled by [`DeliveryQueue::expired`] since the last
    /// [`DeliveryQueue::take_resends`].
    resends: u64,
}

impl DeliveryQueue {
    /// The id and origin of every third-party group's object message waiting or in flight
    /// (reported to their controllers when the session ends; Verge's own are resynced by
    /// inventory instead).
    pub(crate) fn app_messages(&self) -> Vec<(String, Origin)> {
        let waiting = self.waiting.values().flatten();
        let inflight = self.inflight.values().map(|f| &f.queued);
        waiting
            .chain(inflight)
            .filter(|q| !q.message.group.is_verge())
            .map(|q| (q.message.id.to_string(), q.origin))
            .collect()
    }

    /// An empty queue bounded by `limits`.
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            answers: VecDeque::new(),
            waiting: HashMap::new(),
            ready: VecDeque::new(),
            waiting_len: 0,
            inflight: HashMap::new(),
            inflight_keys: HashMap::new(),
            due: VecDeque::new(),
            resends: 0,
        }
    }

    /// Messages waiting to be sent (not counting resends).
    pub(crate) fn waiting(&self) -> usize {
        self.waiting_len
    }

    /// Resends scheduled (an answer overdue, a retry left) since the last call, for the
    /// `verge_cloudhub_delivery_retries_total` counter.
    pub(crate) fn take_resends(&mut self) -> u64 {
        std::mem::take(&mut self.resends)
    }

    /// Object messages sent and not yet answered.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// Queues `message` (already rewritten to the edge side) from `origin`.
    ///
    /// A full-state object message of Verge's own groups whose key already waits replaces the
    /// waiting message(s) and always succeeds; a third-party group's message queues behind
    /// them (never coalesced).
    ///
    /// # Errors
    /// [`QueueFull`] when `capacity` messages wait already; the queue is then unchanged.
    pub(crate) fn push(&mut self, mut message: Envelope, origin: Origin) -> Result<(), QueueFull> {
        let key = message.delivery_key().cloned();
        // A third party's messages are commands as often as states: each one is delivered.
        let supersedes = message.supersedes() && message.group.is_verge();
        let Some(key) = key else {
            self.check_room()?;
            let span = DeliverSpan(tracing::Span::none());
            self.answers.push_back(Queued {
                message,
                origin,
                span,
            });
            self.waiting_len += 1;
            return Ok(());
        };
        if !supersedes || !self.waiting.contains_key(&key) {
            self.check_room()?;
        }
        let span = DeliverSpan(deliver_span(&mut message));
        let queued = Queued {
            message,
            origin,
            span,
        };
        if supersedes && let Some(list) = self.waiting.get_mut(&key) {
            self.waiting_len = self.waiting_len + 1 - list.len();
            for replaced in list.drain(..) {
                replaced.span.in_scope(|| {
                    tracing::info!(target: verge_telemetry::TARGET, "replaced by a newer message");
                });
            }
            list.push_back(queued);
            return Ok(());
        }
        self.waiting_len += 1;
        match self.waiting.entry(key) {
            Entry::Occupied(list) => list.into_mut().push_back(queued),
            Entry::Vacant(slot) => {
                if !self.inflight_keys.contains_key(slot.key()) {
                    self.ready.push_back(slot.key().clone());
                }
                slot.insert(VecDeque::from([queued]));
            }
        }
        Ok(())
    }

    fn check_room(&self) -> Result<(), QueueFull> {
        if self.waiting_len >= self.limits.capacity {
            return Err(QueueFull {
                waiting: self.waiting_len,
            });
        }
        Ok(())
    }

    /// The next message to put on the wire at `now`: answers first, then due resends (same
    /// id), then the oldest ready object message while fewer than `max_inflight` are in
    /// flight. Object messages returned are in flight until [`DeliveryQueue::ack`] or
    /// [`DeliveryQueue::expired`]. `None` when nothing may be sent now.
    ///
    /// Message ids are expected to be unique (UUIDs); an object message reusing the id of one
    /// in flight is sent untracked.
    pub(crate) fn next_to_send(&mut self, now: Instant) -> Option<Envelope> {
        if let Some(queued) = self.answers.pop_front() {
            self.waiting_len -= 1;
            return Some(queued.message);
        }
        while let Some(id) = self.due.pop_front() {
            if let Some(sent) = self.inflight.get_mut(&id)
                && sent.deadline.is_none()
            {
                sent.deadline = Some(now + self.limits.ack_timeout);
                sent.attempts += 1;
                let attempts = sent.attempts;
                sent.queued.span.in_scope(|| {
                    tracing::info!(target: verge_telemetry::TARGET, attempt = attempts, "resending unanswered message");
                });
                return Some(sent.queued.message.clone());
            }
        }
        if self.inflight.len() >= self.limits.max_inflight {
            return None;
        }
        let key = self.ready.pop_front()?;
        let list = self.waiting.get_mut(&key)?;
        let queued = list.pop_front()?;
        if list.is_empty() {
            self.waiting.remove(&key);
        }
        self.waiting_len -= 1;
        let id = queued.message.id.clone();
        if self.inflight.contains_key(&id) {
            if self.waiting.contains_key(&key) {
                self.ready.push_front(key);
            }
            return Some(queued.message);
        }
        let message = queued.message.clone();
        self.inflight_keys.insert(key.clone(), id.clone());
        let sent = InFlight {
            key,
            queued,
            attempts: 1,
            deadline: Some(now + self.limits.ack_timeout),
        };
        self.inflight.insert(id, sent);
        Some(message)
    }

    /// Clears the in-flight message `parent_id` because the edge answered it (`ack`, or
    /// `error`/`response`: it handled the message, resending would not change the answer).
    /// Its key's next waiting message becomes ready. Returns whether it was in flight.
    pub(crate) fn ack(&mut self, parent_id: &str) -> bool {
        let Some(sent) = self.inflight.remove(parent_id) else {
            return false;
        };
        sent.queued.span.record("verge.attempts", sent.attempts);
        self.release(&sent.key);
        true
    }

    fn release(&mut self, key: &ResourceKey) {
        self.inflight_keys.remove(key);
        if self.waiting.contains_key(key) {
            self.ready.push_back(key.clone());
        }
    }

    /// Handles in-flight messages whose answer is overdue at `now`: those sent fewer than
    /// `1 + max_retries` times become due for a resend (returned by
    /// [`DeliveryQueue::next_to_send`]); the others are dropped, freeing their key, and
    /// returned, oldest deadline first, so their origin can be told.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<Unacked> {
        let mut overdue: Vec<(Instant, MessageId)> = self
            .inflight
            .iter()
            .filter_map(|(id, sent)| sent.deadline.filter(|d| *d <= now).map(|d| (d, id.clone())))
            .collect();
        overdue.sort();
        let mut dropped = Vec::new();
        for (_, id) in overdue {
            let Some(sent) = self.inflight.get_mut(&id) else {
                continue;
            };
            if sent.attempts <= self.limits.max_retries {
                sent.deadline = None;
                self.resends += 1;
                self.due.push_back(id);
                continue;
            }
            if let Some(sent) = self.inflight.remove(&id) {
                let span = &sent.queued.span;
                span.record("otel.status_code", "ERROR");
                span.record("verge.attempts", sent.attempts);
                span.in_scope(|| {
                    tracing::warn!(target: verge_telemetry::TARGET, attempts = sent.attempts, "no answer; given up");
                });
                self.release(&sent.key);
                dropped.push(Unacked {
                    message_id: id.into_string(),
                    origin: sent.queued.origin,
                    attempts: sent.attempts,
                });
            }
        }
        dropped
    }

    /// Frees the allocations of its emptied tables: a hash map or deque keeps its capacity
    /// when emptied, and an idle session would hold the in-flight table of the last message
    /// it sent (4 slots of about 600 bytes) for as long as it lives, 2.5 KiB per session
    /// among 10,000 (`cargo xtask bench scale`). A no-op for tables in use or unallocated.
    pub(crate) fn release_idle_tables(&mut self) {
        if self.inflight.is_empty() {
            self.inflight.shrink_to_fit();
        }
        if self.inflight_keys.is_empty() {
            self.inflight_keys.shrink_to_fit();
        }
        if self.waiting.is_empty() {
            self.waiting.shrink_to_fit();
        }
        if self.answers.is_empty() {
            self.answers.shrink_to_fit();
        }
        if self.ready.is_empty() {
            self.ready.shrink_to_fit();
        }
        if self.due.is_empty() {
            self.due.shrink_to_fit();
        }
    }

    /// The earliest deadline of an in-flight message, when [`DeliveryQueue::expired`] has
    /// work next; `None` when nothing awaits an answer.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.inflight.values().filter_map(|s| s.deadline).min()
    }
}
