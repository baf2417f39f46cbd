//! [`ResizeConditions`]: the pod conditions of an in-place resize, kept as the kubelet's
//! status manager keeps them (`SetPodResizePendingCondition`,
//! `SetPodResizeInProgressCondition` and their `Clear…` counterparts):
//!
//! * `PodResizePending` (reason `Infeasible` or `Deferred`, the fit's message): the desired
//!   resources are not allocated. Cleared once they are, or when the spec goes back to the
//!   allocation.
//! * `PodResizeInProgress` (no reason, or `Error` with the failure): allocated resources are
//!   not yet applied to the running containers. Set again (with the new generation) when a
//!   resize is allocated; an error stays until it is cleared.
//!
//! Both carry `observedGeneration`, the pod generation they were set for. A worker starting
//! again takes them from the pod's status (kubelet `BackfillPodResizeConditions`).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `PodResizePending`.
pub const PENDING: &str = "PodResizePending";
/// `PodResizeInProgress`.
pub const IN_PROGRESS: &str = "PodResizeInProgress";
/// The reason of a `PodResizeInProgress` whose actuation failed.
pub const ERROR: &str = "Error";

/// See the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResizeConditions {
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
}

/// The condition `type_` after an update from `old` (kept transition time while the reason
/// stays).
fn updated(
    type_: &str,
    old: Option<&PodCondition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> PodCondition {
    let kept = old
        .filter(|o| o.reason.as_deref().unwrap_or_default() == reason)
        .and_then(|o| o.last_transition_time.clone());
    PodCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(kept.unwrap_or_else(|| now.clone())),
        observed_generation: generation,
        reason: Some(reason.to_owned()).filter(|r| !r.is_empty()),
        message: Some(message.to_owned()).filter(|m| !m.is_empty()),
    }
}

impl ResizeConditions {
    /// The conditions `pod`'s status holds (after an edgecore restart).
    pub fn backfill(pod: &Pod) -> Self {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
        let find = |t: &str| {
            conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == t && c.status == "True")
                .cloned()
        };
        Self {
            pending: find(PENDING),
            in_progress: find(IN_PROGRESS),
        }
    }

    /// Sets `PodResizePending` (`reason` `Infeasible`; any other is `Deferred`); true when
    /// it is new or its reason or generation changed (the kubelet then records an event).
    pub fn set_pending(
        &mut self,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        now: &Time,
    ) -> bool {
        let reason = if reason == "Infeasible" {
            reason
        } else {
            "Deferred"
        };
        let old = self.pending.take();
        let new = updated(PENDING, old.as_ref(), reason, message, generation, now);
        let changed = old.is_none_or(|o| {
            o.reason.as_deref() != Some(reason) || o.observed_generation != generation
        });
        self.pending = Some(new);
        changed
    }

    /// Clears `PodResizePending`.
    pub fn clear_pending(&mut self) {
        self.pending = None;
    }

    /// Sets `PodResizeInProgress`. An existing one keeps its generation, and its reason and
    /// message when `reason` and `message` are empty; to move the generation, clear it first.
    /// Returns the condition's generation and whether it changed.
    pub fn set_in_progress(
        &mut self,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        now: &Time,
    ) -> (Option<i64>, bool) {
        let old = self.in_progress.take();
        let (mut reason, mut message, mut generation) = (reason, message, generation);
        if let Some(o) = &old {
            if reason.is_empty() && message.is_empty() {
                reason = o.reason.as_deref().unwrap_or_default();
                message = o.message.as_deref().unwrap_or_default();
            }
            generation = o.observed_generation;
        }
        let new = updated(IN_PROGRESS, old.as_ref(), reason, message, generation, now);
        let changed = old.as_ref().is_none_or(|o| {
            (&o.reason, &o.message, o.observed_generation)
                != (&new.reason, &new.message, new.observed_generation)
        });
        self.in_progress = Some(new);
        (generation, changed)
    }

    /// Clears `PodResizeInProgress`; the generation it had, if there was one.
    pub fn clear_in_progress(&mut self) -> Option<Option<i64>> {
        self.in_progress.take().map(|c| c.observed_generation)
    }

    /// The conditions to report: pending, then in progress.
    pub fn list(&self) -> impl Iterator<Item = &PodCondition> {
        self.pending.iter().chain(self.in_progress.iter())
    }

    /// Clears both (a terminal pod).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).expect("time"))
    }

    #[test]
    fn pending_changes_with_reason_or_generation() {
        let mut c = ResizeConditions::default();
        assert!(c.set_pending("OutOfcpu", "m", Some(2), &at(1)));
        assert!(!c.set_pending("OutOfcpu", "m2", Some(2), &at(2)));
        let p = c.list().next().cloned().expect("pending");
        assert_eq!(p.reason.as_deref(), Some("Deferred"));
        assert_eq!(p.last_transition_time, Some(at(1)));
        assert!(c.set_pending("Infeasible", "m", Some(2), &at(3)));
        assert!(c.set_pending("Infeasible", "m", Some(3), &at(4)));
        c.clear_pending();
        assert_eq!(c.list().count(), 0);
    }

    #[test]
    fn in_progress_keeps_its_generation_and_error_until_cleared() {
        let mut c = ResizeConditions::default();
        assert_eq!(c.set_in_progress("", "", Some(2), &at(1)), (Some(2), true));
        assert_eq!(c.set_in_progress("", "", Some(3), &at(2)), (Some(2), false));
        assert_eq!(
            c.set_in_progress(ERROR, "boom", Some(3), &at(3)),
            (Some(2), true)
        );
        assert_eq!(c.set_in_progress("", "", Some(3), &at(4)), (Some(2), false));
        let p = c.list().next().cloned().expect("in progress");
        assert_eq!(
            (p.reason.as_deref(), p.message.as_deref()),
            (Some(ERROR), Some("boom"))
        );
        assert_eq!(c.clear_in_progress(), Some(Some(2)));
        assert_eq!(c.clear_in_progress(), None);
    }

    #[test]
    fn backfilled_from_the_pods_status() {
        let pod: Pod = serde_json::from_value(serde_json::json!({"status": {"conditions": [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
            {"type": "Ready", "status": "True"}]}}))
        .expect("pod");
        let c = ResizeConditions::backfill(&pod);
        assert_eq!(
            c.list().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            [PENDING]
        );
    }
}
