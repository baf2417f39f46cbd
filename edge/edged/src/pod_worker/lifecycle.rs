//! The worker's side of the pod lifecycle ([`PodState`]): moving to the state an event leads
//! to, and the two events that do not come from a sync's step: admission (kubelet:
//! `canAdmitPod`) and deletion.

use tracing::{info, warn};

use super::Worker;
use super::state::{Failure, PodEvent, PodState};
use crate::events::EventType;
use verge_container_runtime::ContainerRuntime;

impl<R: ContainerRuntime> Worker<R> {
    /// Moves the pod to the state `event` leads to. An event the state does not allow is a
    /// bug of the worker: it fails the unit tests, and is otherwise logged, the state left
    /// as it was. A pod no longer [active](PodState::is_active) frees its share of the node.
    pub(super) fn transition(&mut self, event: PodEvent) {
        let state = std::mem::replace(&mut self.state, PodState::Terminated);
        self.state = match state.transition(event) {
            Ok(next) => next,
            Err(refused) => {
                if cfg!(test) {
                    panic!("{refused}");
                }
                warn!(error = %refused, "pod transition refused");
                refused.state
            }
        };
        if !self.state.is_active() {
            self.admission = None;
        }
    }

    /// Deletion was requested (the pod left the store, or has a `deletionTimestamp`): the
    /// pod terminates with its grace period ([`Worker::grace`]) unless it already does.
    pub(super) fn delete(&mut self) {
        if self.state.is_terminating() {
            return;
        }
        let grace = self.grace();
        info!(?grace, "terminating pod");
        self.transition(PodEvent::Deleted { grace });
    }

    /// Admission of a pod not started yet ([`crate::admission::admit`]), once: an admitted
    /// pod keeps its share of the node while it is active. A pod the node refuses is
    /// [`PodState::Rejected`] at once and for good (its controller makes a new pod), with a
    /// Warning event of the kubelet's reason and message, the status message being
    /// `Pod was rejected: <message>` (kubelet: `rejectPod`); nothing of it is created.
    pub(super) fn admit(&mut self) {
        if self.state != PodState::Pending || self.admission.is_some() {
            return;
        }
        match crate::admission::admit(&self.ctx.admitted, &self.uid, &self.pod) {
            Ok(ticket) => self.admission = Some(ticket),
            Err((reason, message)) => {
                warn!(%reason, %message, "pod rejected");
                self.pod_event(EventType::Warning, reason, message.clone());
                let message = format!("{}{message}", crate::admission::REJECTED_PREFIX);
                self.transition(PodEvent::Rejected(Failure::new(reason, message)));
            }
        }
    }
}
