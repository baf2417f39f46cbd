//! [`Schedule`]: which node Leases are renewed when, without I/O (the task in the parent
//! module executes what it hands out).
//!
//! A node is in the schedule while its session lives ([`Schedule::connected`] to
//! [`Schedule::disconnected`]). What happens at its turn depends on what is known:
//! * [`Action::Adopt`]: nothing yet; the node connected but its edge's Lease message was not
//!   applied (it is on its way, was lost, or went to the leader before this one). A merge
//!   patch of `spec.renewTime` alone renews an existing Lease, and its answer tells the
//!   holder and duration. Due [`ADOPT_AFTER`] after the connect, so a Lease message that
//!   follows the connect at once makes it unnecessary.
//! * [`Action::Renew`]: the edge's Lease was applied; a merge patch of `spec.renewTime`,
//!   `holderIdentity` and `leaseDurationSeconds`.
//! * [`Action::Create`]: the edge's Lease could not be applied (e.g. its Node was not
//!   registered yet); the whole renewal of the edge's message again (get-or-create).
//!
//! A 404 on a patch drops the node's turns until the edge's next Lease message (on its next
//! session). Each node renews every quarter of its `leaseDurationSeconds` (the kubelet's
//! renew interval), at its own phase of that interval (a hash of its name), so the patches of
//! many nodes are spread over the interval instead of coming in bursts, even after they all
//! connected at once. The first turn after a renewal is the node's first phase point at least
//! a quarter interval later, so at most 1.25 intervals pass between two renewals.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::time::Duration;

use tokio::time::Instant;

/// `leaseDurationSeconds` assumed until a node's own is known.
pub const DEFAULT_LEASE_DURATION_SECONDS: i32 =
    crate::upstream::lease::DEFAULT_LEASE_DURATION_SECONDS;

/// How long after a connect an unknown node's Lease is adopted (see the module docs).
pub const ADOPT_AFTER: Duration = Duration::from_secs(1);

/// The renewal parameters an edge sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// `spec.holderIdentity`.
    pub holder_identity: String,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
}

/// The renew interval for a Lease of `lease_duration_seconds`: a quarter of it (the
/// kubelet's `renewInterval`), at least 250 ms.
pub fn renew_interval(lease_duration_seconds: i32) -> Duration {
    let seconds = u64::try_from(lease_duration_seconds.max(1)).unwrap_or(1);
    Duration::from_millis(seconds * 250)
}

/// What a node's turn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Patch `spec.renewTime` only and learn the parameters from the answer.
    Adopt,
    /// Patch `spec.renewTime`, `holderIdentity` and `leaseDurationSeconds`.
    Renew(Params),
    /// Renew as for the edge's message: get-or-create, owner reference.
    Create(Params),
}

/// One turn handed out by [`Schedule::take_due`]; hand it back with its outcome to
/// [`Schedule::finished`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The node.
    pub node: String,
    /// What to do.
    pub action: Action,
    /// The node's state generation when the job was made.
    generation: u64,
    /// Tells this job from the node's others.
    id: u64,
}

/// How a [`Job`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Lease was renewed; `Some` with the parameters it holds (an adoption).
    Renewed(Option<Params>),
    /// The patch was answered 404 (no such Lease): no more turns until the edge's next Lease
    /// message.
    NotFound,
    /// Anything else: tried again at the next turn.
    Failed,
}

#[derive(Debug)]
enum State {
    Adopt,
    Renew(Params),
    Create(Params),
    /// A 404: nothing to renew until the edge sends its Lease.
    Dropped,
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// Changes with every change of `state` (from a process-wide counter).
    generation: u64,
    /// The next turn, also in [`Schedule::queue`].
    due: Option<(Instant, u64)>,
    /// The id of the job being executed.
    in_flight: Option<u64>,
}

impl Entry {
    fn interval(&self) -> Duration {
        let seconds = match &self.state {
            State::Renew(p) | State::Create(p) => p.lease_duration_seconds,
            State::Adopt | State::Dropped => DEFAULT_LEASE_DURATION_SECONDS,
        };
        renew_interval(seconds)
    }
}

/// The connected nodes and their next turns; see the module docs.
#[derive(Debug)]
pub struct Schedule {
    /// Phase points are counted from here.
    epoch: Instant,
    entries: HashMap<String, Entry>,
    /// (due, ticket, node), earliest first.
    queue: BTreeSet<(Instant, u64, String)>,
    counter: u64,
}

impl Schedule {
    /// An empty schedule whose phases count from `epoch`.
    pub fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            entries: HashMap::new(),
            queue: BTreeSet::new(),
            counter: 0,
        }
    }

    /// Number of connected nodes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no node is connected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The earliest turn.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _, _)| *at)
    }

    /// `node`'s session started at `now`. A node already here (a newer session replacing
    /// the current one) keeps what is known.
    pub fn connected(&mut self, node: &str, now: Instant) {
        if self.entries.contains_key(node) {
            return;
        }
        let generation = self.tick();
        let entry = Entry {
            state: State::Adopt,
            generation,
            due: None,
            in_flight: None,
        };
        self.entries.insert(node.to_owned(), entry);
        self.schedule(node, now + ADOPT_AFTER);
    }

    /// `node`'s session ended: no more turns.
    pub fn disconnected(&mut self, node: &str) {
        if let Some(entry) = self.entries.remove(node) {
            self.unschedule(node, entry.due);
        }
    }

    /// The edge's Lease message of `node` was applied at `now` (`applied`), or failed. Returns
    /// false when the node has no session (a message of an ended session): nothing changes.
    pub fn lease_message(
        &mut self,
        node: &str,
        params: Params,
        applied: bool,
        now: Instant,
    ) -> bool {
        let generation = self.tick();
        let Some(entry) = self.entries.get_mut(node) else {
            return false;
        };
        entry.state = if applied {
            State::Renew(params)
        } else {
            State::Create(params)
        };
        entry.generation = generation;
        let due = entry.due;
        self.unschedule(node, due);
        let at = self.after_renewal(node, now);
        self.schedule(node, at);
        true
    }

    /// The jobs due at `now`, at most `max`, each taken off until it is [`finished`]
    /// (its node's next turn is already scheduled).
    ///
    /// [`finished`]: Self::finished
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<Job> {
        let mut jobs = Vec::new();
        while jobs.len() < max {
            let Some((at, ticket, node)) = self.queue.first().cloned() else {
                break;
            };
            if at > now {
                break;
            }
            self.queue.remove(&(at, ticket, node.clone()));
            let Some(entry) = self.entries.get_mut(&node) else {
                continue;
            };
            entry.due = None;
            let action = match &entry.state {
                State::Adopt => Action::Adopt,
                State::Renew(p) => Action::Renew(p.clone()),
                State::Create(p) => Action::Create(p.clone()),
                State::Dropped => continue,
            };
            let (interval, busy, generation) = (
                entry.interval(),
                entry.in_flight.is_some(),
                entry.generation,
            );
            // The next turn: one interval on, or the first phase point from `now` when late.
            let next = self.next_point(&node, interval, (at + interval).max(now));
            self.schedule(&node, next);
            if busy {
                // The previous turn's patch is still running: skip this one.
                continue;
            }
            let id = self.tick();
            if let Some(entry) = self.entries.get_mut(&node) {
                entry.in_flight = Some(id);
            }
            jobs.push(Job {
                node,
                action,
                generation,
                id,
            });
        }
        jobs
    }

    /// `job` ended with `outcome` at `now`. Changes nothing when the node left or its state
    /// changed meanwhile (a newer Lease message, a new session).
    pub fn finished(&mut self, job: &Job, outcome: Outcome, now: Instant) {
        let generation = self.tick();
        let Some(entry) = self.entries.get_mut(&job.node) else {
            return;
        };
        if entry.in_flight == Some(job.id) {
            entry.in_flight = None;
        }
        if entry.generation != job.generation {
            return;
        }
        let state = match (outcome, &entry.state) {
            (Outcome::Renewed(Some(params)), _) => State::Renew(params),
            (Outcome::Renewed(None), State::Create(params)) => State::Renew(params.clone()),
            (Outcome::NotFound, _) => State::Dropped,
            (Outcome::Renewed(None) | Outcome::Failed, _) => return,
        };
        let adopted = matches!(entry.state, State::Adopt);
        let dropped = matches!(state, State::Dropped);
        entry.state = state;
        entry.generation = generation;
        let due = entry.due;
        if dropped {
            self.unschedule(&job.node, due);
        } else if adopted {
            // Its own interval from now on.
            self.unschedule(&job.node, due);
            let at = self.after_renewal(&job.node, now);
            self.schedule(&job.node, at);
        }
    }

    /// The node's first turn after a renewal at `now`: its first phase point at least a
    /// quarter interval later.
    fn after_renewal(&self, node: &str, now: Instant) -> Instant {
        let interval = self.entries.get(node).map_or_else(
            || renew_interval(DEFAULT_LEASE_DURATION_SECONDS),
            Entry::interval,
        );
        self.next_point(node, interval, now + interval / 4)
    }

    /// The first instant at or after `after` at `node`'s phase of `interval`.
    fn next_point(&self, node: &str, interval: Duration, after: Instant) -> Instant {
        let period = interval.as_nanos().max(1);
        let phase = u128::from(phase_hash(node)) % period;
        let since = after.saturating_duration_since(self.epoch).as_nanos();
        // The smallest epoch + phase + k * period >= after.
        let k = since.saturating_sub(phase).div_ceil(period);
        let offset = phase + k * period;
        let offset = Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX));
        (self.epoch + offset).max(after)
    }

    fn schedule(&mut self, node: &str, at: Instant) {
        let ticket = self.tick();
        if let Some(entry) = self.entries.get_mut(node) {
            entry.due = Some((at, ticket));
            self.queue.insert((at, ticket, node.to_owned()));
        }
    }

    fn unschedule(&mut self, node: &str, due: Option<(Instant, u64)>) {
        if let Some((at, ticket)) = due {
            self.queue.remove(&(at, ticket, node.to_owned()));
        }
        if let Some(entry) = self.entries.get_mut(node) {
            entry.due = None;
        }
    }

    fn tick(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }
}

/// A stable hash of the node name: its phase.
fn phase_hash(node: &str) -> u64 {
    // SipHash with fixed keys: the same phase for a node on every run and replica.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests;
