//! The leader-election record kept in a Lease's spec, and the pure decisions of client-go's
//! `tryAcquireOrRenew` and `release` over it: who holds it, whether the holder's term is
//! still running as this replica observed it, and the spec to write.
//!
//! Validity is measured on this replica's monotonic clock from the moment it last saw the
//! record change (client-go's `observedTime`), never by comparing `renewTime` with the local
//! wall clock, so clock skew between replicas does not matter.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use tokio::time::{Duration, Instant};

/// The Lease as this replica last read or wrote it, and when (local monotonic time) its
/// record last changed.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// The object, with the `resourceVersion` the next write is guarded by.
    pub lease: Lease,
    /// When the record (the spec) was first seen in this form.
    pub at: Instant,
}

/// What to do after reading the Lease.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Another replica holds it and its term has not run out: wait.
    Held(String),
    /// Write this spec (acquire, or renew our own term).
    Write(LeaseSpec),
}

impl Observed {
    /// `lease` as read at `now`: the observation time is kept when the record is unchanged
    /// since `previous` (only its `resourceVersion` may differ), else it is `now`.
    pub(crate) fn read(previous: Option<&Observed>, lease: Lease, now: Instant) -> Self {
        let at = match previous {
            Some(p) if p.lease.spec == lease.spec => p.at,
            _ => now,
        };
        Self { lease, at }
    }

    /// The holder's identity; `None` when nobody holds it (absent or empty).
    pub(crate) fn holder(&self) -> Option<&str> {
        holder(&self.lease)
    }

    /// Whether the holder's term still runs at `now`: observed less than its
    /// `leaseDurationSeconds` ago.
    pub(crate) fn valid_at(&self, now: Instant) -> bool {
        let seconds = spec(&self.lease)
            .and_then(|s| s.lease_duration_seconds)
            .map_or(0, |s| u64::try_from(s).unwrap_or(0));
        self.at + Duration::from_secs(seconds) > now
    }

    /// Whether `identity` holds it.
    pub(crate) fn held_by(&self, identity: &str) -> bool {
        self.holder() == Some(identity)
    }

    /// client-go's decision: wait while another holder's term runs; otherwise write a term
    /// for `identity` of `duration_seconds` from `wall` — keeping `acquireTime` and
    /// `leaseTransitions` when renewing our own term, counting a transition when taking it
    /// over.
    pub(crate) fn decide(
        &self,
        identity: &str,
        now: Instant,
        wall: Timestamp,
        duration_seconds: i32,
    ) -> Decision {
        if let Some(holder) = self.holder()
            && holder != identity
            && self.valid_at(now)
        {
            return Decision::Held(holder.to_owned());
        }
        Decision::Write(next_term(
            spec(&self.lease),
            identity,
            wall,
            duration_seconds,
        ))
    }
}

/// The holder of `lease`, when not absent or empty.
pub(crate) fn holder(lease: &Lease) -> Option<&str> {
    spec(lease)
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn spec(lease: &Lease) -> Option<&LeaseSpec> {
    lease.spec.as_ref()
}

/// The spec of a term for `identity` from `wall` lasting `duration_seconds`, following
/// `current` (none: a new Lease): a renewal of our own term keeps its `acquireTime` and
/// transition count, a take-over counts one more transition.
pub(crate) fn next_term(
    current: Option<&LeaseSpec>,
    identity: &str,
    wall: Timestamp,
    duration_seconds: i32,
) -> LeaseSpec {
    let now = MicroTime(wall);
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    let ours = current.and_then(|s| s.holder_identity.as_deref()) == Some(identity);
    let (acquire_time, lease_transitions) = match current {
        Some(s) if ours => (s.acquire_time.clone().or(Some(now.clone())), transitions),
        Some(_) => (Some(now.clone()), transitions.saturating_add(1)),
        None => (Some(now.clone()), 0),
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time,
        renew_time: Some(now),
        lease_transitions: Some(lease_transitions),
        ..LeaseSpec::default()
    }
}

/// The spec that gives a term up (client-go's `ReleaseOnCancel`): no holder, a duration of
/// one second, the transition count kept, so a standby takes it at its next attempt.
pub(crate) fn released(current: Option<&LeaseSpec>, wall: Timestamp) -> LeaseSpec {
    let now = MicroTime(wall);
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_transitions: current.and_then(|s| s.lease_transitions),
        ..LeaseSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(spec: LeaseSpec) -> Lease {
        Lease {
            spec: Some(spec),
            ..Lease::default()
        }
    }

    fn term(holder: &str, seconds: i32, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(transitions),
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn another_holder_is_waited_for_until_its_term_runs_out() {
        let t0 = Instant::now();
        let seen = Observed::read(None, lease(term("b", 15, 3)), t0);
        let wall = Timestamp::now();
        assert_eq!(
            seen.decide("a", t0 + Duration::from_secs(14), wall, 15),
            Decision::Held("b".into())
        );
        let Decision::Write(spec) = seen.decide("a", t0 + Duration::from_secs(15), wall, 15) else {
            panic!("expired term not taken");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(
            spec.lease_transitions,
            Some(4),
            "a take-over is a transition"
        );
        assert_eq!(spec.acquire_time, Some(MicroTime(wall)));
    }

    #[test]
    fn observation_time_moves_only_when_the_record_changes() {
        let t0 = Instant::now();
        let first = Observed::read(None, lease(term("b", 15, 0)), t0);
        let mut same = lease(term("b", 15, 0));
        same.metadata.resource_version = Some("42".into());
        let later = t0 + Duration::from_secs(10);
        let again = Observed::read(Some(&first), same, later);
        assert_eq!(
            again.at, t0,
            "an unchanged record keeps its observation time"
        );
        let renewed = Observed::read(Some(&again), lease(term("b", 15, 1)), later);
        assert_eq!(renewed.at, later);
        assert!(renewed.valid_at(later + Duration::from_secs(14)));
    }

    #[test]
    fn own_renewal_keeps_acquire_time_and_transitions() {
        let t0 = Instant::now();
        let seen = Observed::read(None, lease(term("a", 15, 2)), t0);
        assert!(seen.held_by("a"));
        let Decision::Write(spec) = seen.decide("a", t0, Timestamp::now(), 15) else {
            panic!("own term not renewed");
        };
        assert_eq!(spec.lease_transitions, Some(2));
        assert_eq!(spec.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
    }

    #[test]
    fn released_or_empty_leases_are_free() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let free = Observed::read(None, lease(released(Some(&term("b", 15, 5)), wall)), t0);
        assert_eq!(free.holder(), None);
        let Decision::Write(spec) = free.decide("a", t0, wall, 15) else {
            panic!("released lease not taken");
        };
        assert_eq!(spec.lease_transitions, Some(6));
        let mut empty = term("", 15, 0);
        empty.holder_identity = Some(String::new());
        let empty = Observed::read(None, lease(empty), t0);
        assert!(matches!(
            empty.decide("a", t0, wall, 15),
            Decision::Write(_)
        ));
        assert_eq!(next_term(None, "a", wall, 15).lease_transitions, Some(0));
    }
}
