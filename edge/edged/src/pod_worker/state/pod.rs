//! [`PodState`]: where a pod is in its lifecycle, and its transitions
//! ([`PodState::transition`]). Deletion, rejection at admission and eviction are states of
//! the lifecycle, not flags beside it: a pod is never e.g. "Running but deleted".
//!
//! ```text
//!  Pending --sandbox+volumes--> Initializing --init containers exit 0--> Running
//!   |  ^                            | init fails, restartPolicy Never     | no container will
//!   |  |                            v                                     v restart again
//!   |  |                       Completed{succeeded: false} <--------- Completed{succeeded}
//!   |  +-- sandbox lost (from any live state: Pending, Initializing, Running)
//!   +-- admission refused --> Rejected(failure)                 (nothing was created)
//!  live state --activeDeadlineSeconds passed--> Evicted(failure) (containers stopped, kept)
//!  any state but Terminated --deletionTimestamp or cloud delete--> Terminating{grace, failure}
//!  Terminating --containers and sandbox stopped--> Stopped{failure} (terminal status reported)
//!  Stopped --removed, deletion reported--> Terminated              (the worker ends)
//! ```
//!
//! A pod holds its share of the node (its admission, [`crate::admission`]) while it is
//! [active](PodState::is_active): from admission until it is done or its containers are
//! stopped after a deletion.
//!
//! Every other (state, event) pair is refused with an [`IllegalTransition`].

use std::time::Duration;

/// Why the node failed a pod (the kubelet's `status.reason` and `status.message`): refused at
/// admission, or evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `status.reason`, e.g. `SysctlForbidden` or `DeadlineExceeded`.
    pub reason: &'static str,
    /// `status.message`.
    pub message: String,
}

impl Failure {
    /// The failure of reason `reason` and message `message`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// Where the pod is in its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Admission pending, or the sandbox or the volumes are not ready yet (phase `Pending`).
    Pending,
    /// Init containers are running, in order (phase `Pending`).
    Initializing,
    /// App containers are managed (started, restarted per restartPolicy); the phase follows
    /// the kubelet's `getPhase` over their statuses.
    Running,
    /// Every container has exited and none will be restarted (restartPolicy Never/OnFailure),
    /// or an init container failed under restartPolicy Never.
    Completed {
        /// All exited 0 (phase Succeeded), else phase Failed.
        succeeded: bool,
    },
    /// The node refused the pod at admission (kubelet: `canAdmitPod`, e.g.
    /// `PodOSNotSupported`, `SysctlForbidden`): phase `Failed` with the failure's reason and
    /// message, a Warning event of that reason, and nothing of the pod is ever created.
    Rejected(Failure),
    /// The node failed the pod while it was live (kubelet: the active-deadline handler,
    /// `DeadlineExceeded`): phase `Failed` with the failure's reason and message; its
    /// containers and sandbox are stopped but kept until the pod is deleted.
    Evicted(Failure),
    /// Being torn down after a deletion (kubelet: the pod worker's terminating state,
    /// `killPod`): containers stopped with `grace`, then [`PodState::Stopped`]. Phase
    /// `Failed` with the failure's reason and message when the node had failed the pod
    /// (kubelet: no transition out of a terminal phase), else from the containers' statuses.
    Terminating {
        /// The grace period (SIGTERM, then SIGKILL after it).
        grace: Duration,
        /// The failure the pod had before its deletion (rejected or evicted), still reported
        /// while it terminates.
        failure: Option<Failure>,
    },
    /// Every container and the sandbox of the deleted pod are stopped (kubelet: the pod
    /// worker's terminated state, `SyncTerminatedPod`, then the status manager's
    /// `TerminatePod`): the pod's terminal status is reported (phase `Succeeded` if every
    /// container succeeded, else `Failed`, whatever the restart policy; a container that
    /// never ran shows as terminated, `ContainerStatusUnknown`), then its containers and
    /// directory are removed and the deletion reported.
    Stopped {
        /// The failure the pod had before its deletion, still reported.
        failure: Option<Failure>,
    },
    /// Torn down and reported; the worker ends.
    Terminated,
}

/// What happened to the pod, as a sync observed it; [`PodState::transition`] decides the
/// state it leads to, or refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEvent {
    /// No sandbox runs (first sync, or it died): it is being (re)created.
    SandboxMissing,
    /// An init container is still running or being started.
    InitRunning,
    /// Every init container succeeded (or app containers exist): the app containers run.
    Initialized,
    /// Every container exited and none will be restarted.
    Finished {
        /// All exited 0.
        succeeded: bool,
    },
    /// The node refused the pod at admission.
    Rejected(Failure),
    /// The node failed the live pod (its containers were stopped).
    Evicted(Failure),
    /// Deletion was requested (`deletionTimestamp`, or the pod left the store) with `grace`.
    Deleted {
        /// The grace period.
        grace: Duration,
    },
    /// Every container and the sandbox of the terminating pod were stopped (kubelet:
    /// `killPod` returned).
    Killed,
    /// Every container was removed and the deletion reported.
    TornDown,
}

/// An event the pod's state does not allow (e.g. [`PodEvent::Initialized`] in
/// [`PodState::Completed`]); the state stays as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal pod transition: {event:?} in state {state:?}")]
pub struct IllegalTransition {
    /// The state, unchanged.
    pub state: PodState,
    /// The refused event.
    pub event: PodEvent,
}

impl PodState {
    /// The state of a pod new to this worker: `phase` is the phase last reported for it; a
    /// pod already reported `Succeeded` or `Failed` is not run again (kubelet: terminal pods
    /// are skipped).
    pub fn initial(phase: Option<&str>) -> Self {
        match phase {
            Some("Succeeded") => Self::Completed { succeeded: true },
            Some("Failed") => Self::Completed { succeeded: false },
            _ => Self::Pending,
        }
    }

    /// The state after `event`, if this state allows it:
    /// - live states (`Pending`, `Initializing`, `Running`) move among themselves as the
    ///   sync observes, to `Completed` when done, to `Evicted`, and to `Terminating`;
    ///   only `Pending` (nothing created yet) may be `Rejected`;
    /// - `Completed`, `Rejected` and `Evicted` are left only by deletion;
    /// - `Terminating` takes a shorter grace period from a newer deletion and moves on with
    ///   [`PodEvent::Killed`] to `Stopped`, which ignores newer deletions and ends with
    ///   [`PodEvent::TornDown`];
    /// - `Terminated` allows nothing.
    ///
    /// # Errors
    /// [`IllegalTransition`], holding this state unchanged, for any other event.
    pub fn transition(self, event: PodEvent) -> Result<Self, IllegalTransition> {
        use PodEvent as E;
        let next = match (self, event) {
            // Only a pod not started yet may be refused at admission.
            (Self::Pending, E::Rejected(failure)) => Self::Rejected(failure),
            // Live states: the sync's observations, eviction, deletion.
            (state @ (Self::Pending | Self::Initializing | Self::Running), event) => match event {
                E::SandboxMissing => Self::Pending,
                E::InitRunning => Self::Initializing,
                E::Initialized => Self::Running,
                E::Finished { succeeded } => Self::Completed { succeeded },
                E::Evicted(failure) => Self::Evicted(failure),
                E::Deleted { grace } => Self::Terminating {
                    grace,
                    failure: None,
                },
                event @ (E::Rejected(_) | E::Killed | E::TornDown) => {
                    return Err(IllegalTransition { state, event });
                }
            },
            // Done, not deleted: only deletion; a failure is kept for the reports.
            (Self::Completed { .. }, E::Deleted { grace }) => Self::Terminating {
                grace,
                failure: None,
            },
            (Self::Rejected(failure) | Self::Evicted(failure), E::Deleted { grace }) => {
                Self::Terminating {
                    grace,
                    failure: Some(failure),
                }
            }
            // Terminating: a newer deletion's shorter grace period wins; then stopped.
            (Self::Terminating { grace: g, failure }, E::Deleted { grace }) => Self::Terminating {
                grace: g.min(grace),
                failure,
            },
            (Self::Terminating { failure, .. }, E::Killed) => Self::Stopped { failure },
            // Stopped: nothing left to kill; then the end.
            (state @ Self::Stopped { .. }, E::Deleted { .. }) => state,
            (Self::Stopped { .. }, E::TornDown) => Self::Terminated,
            (state, event) => return Err(IllegalTransition { state, event }),
        };
        Ok(next)
    }

    /// Whether the pod is being or has been torn down.
    pub fn is_terminating(&self) -> bool {
        matches!(
            self,
            Self::Terminating { .. } | Self::Stopped { .. } | Self::Terminated
        )
    }

    /// Whether the pod holds its share of the node (kubelet: an active pod, the ones new pods
    /// are admitted against): live, or terminating with containers still to stop. A pod done
    /// (completed, rejected, evicted) or stopped no longer does.
    pub fn is_active(&self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Initializing | Self::Running | Self::Terminating { .. }
        )
    }

    /// Whether the pod is done but not deleted (completed, rejected or evicted): its
    /// containers are no longer managed.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            Self::Completed { .. } | Self::Rejected(_) | Self::Evicted(_)
        )
    }

    /// Why the node failed the pod (rejected, evicted, or either and now terminating): the
    /// `status.reason` and `status.message` to report.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Self::Rejected(f)
            | Self::Evicted(f)
            | Self::Terminating {
                failure: Some(f), ..
            }
            | Self::Stopped { failure: Some(f) } => Some(f),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
