//! `spec.activeDeadlineSeconds`, as the kubelet's active-deadline handler: once the pod has
//! been active on the node (since `status.startTime`) for that many seconds, it fails with
//! reason `DeadlineExceeded`, a Normal event of that reason is recorded, and its containers
//! are stopped: the pod is [`PodState::Evicted`](super::state::PodState::Evicted). The
//! deadline may be set or shortened on a running pod (the API server allows that update); the
//! next sync after the update applies it.

use std::time::Duration;

use tracing::info;

use super::Worker;
use super::state::{Failure, PodEvent};
use super::sync::Wake;
use crate::Result;
use crate::events::EventType;
use verge_container_runtime::ContainerRuntime;

/// `status.reason` of a pod past its deadline (kubelet's `reason`).
pub(super) const REASON: &str = "DeadlineExceeded";
/// `status.message` of a pod past its deadline and its event's message (kubelet's).
pub(super) const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

impl<R: ContainerRuntime> Worker<R> {
    /// How long the pod may stay active: `None` without `activeDeadlineSeconds`, zero once
    /// past it (seconds since `status.startTime`, as the kubelet counts).
    fn deadline_left(&self) -> Option<Duration> {
        let seconds = self.pod.spec.as_ref()?.active_deadline_seconds?;
        let deadline = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        let now = verge_edge_store::clock::now();
        let active =
            Duration::try_from(now.duration_since(self.start_time.0)).unwrap_or(Duration::ZERO);
        Some(deadline.saturating_sub(active))
    }

    /// Evicts the pod if it is past its deadline (stopping what runs, within the grace
    /// period) and returns `true`; otherwise asks `wake` for a sync when the deadline comes.
    /// A pod done already (completed, rejected, evicted) has no deadline.
    pub(super) async fn enforce_deadline(&mut self, wake: &mut Wake) -> Result<bool> {
        if self.state.is_finished() {
            return Ok(false);
        }
        let Some(left) = self.deadline_left() else {
            return Ok(false);
        };
        if !left.is_zero() {
            wake.at(tokio::time::Instant::now() + left);
            return Ok(false);
        }
        info!("pod is past its activeDeadlineSeconds; failing it");
        self.pod_event(EventType::Normal, REASON, MESSAGE.to_owned());
        let obs = self.observe().await?;
        if let Some(sandbox) = obs.sandbox().cloned() {
            self.wind_down(&obs, Some(&sandbox)).await;
        } else if self.sandboxless(&obs) {
            self.wind_down(&obs, None).await;
        }
        self.transition(PodEvent::Evicted(Failure::new(REASON, MESSAGE)));
        let obs = self.observe().await?;
        self.report(&obs).await;
        Ok(true)
    }
}
