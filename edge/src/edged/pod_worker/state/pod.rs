//! [`PodState`]: where a pod is in its lifecycle, and its transitions ([`PodState::next`]).
//!
//! ```text
//! Pending --sandbox+volumes--> Initializing --init containers exit 0--> Running
//!    ^  |                           | init fails, restartPolicy Never         | no container will
//!    |  |                           v                                         v restart again
//!    |  |                        Completed{succeeded: false}  <----------  Completed{succeeded}
//!    |  +-- sandbox lost (any live state) --> Pending
//!    +-- any state: deletionTimestamp or cloud delete --> Terminating --torn down--> Terminated
//! ```

use std::time::Duration;

/// Where the pod is in its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// The sandbox or the volumes are not ready yet.
    Pending,
    /// Init containers are running, in order.
    Initializing,
    /// App containers are managed (started, restarted per restartPolicy).
    Running,
    /// Every container has exited and none will be restarted (restartPolicy Never/OnFailure).
    Completed {
        /// All exited 0 (phase Succeeded), else phase Failed.
        succeeded: bool,
    },
    /// Being torn down: containers stopped with `grace`, then removed.
    Terminating {
        /// The grace period (SIGTERM, then SIGKILL after it).
        grace: Duration,
    },
    /// Torn down and reported; the worker ends.
    Terminated,
}

/// What happened to the pod, as a sync observed it; [`PodState::next`] decides the state it
/// leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Deletion was requested (`deletionTimestamp`, or the pod left the store) with `grace`.
    Deleted {
        /// The grace period.
        grace: Duration,
    },
    /// Every container was stopped and removed and the deletion reported.
    TornDown,
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

    /// The state after `event`. Deletion moves every live state to `Terminating` (a shorter
    /// grace wins while terminating); `Completed` is left only by deletion, `Terminating` only
    /// by [`PodEvent::TornDown`], `Terminated` never.
    #[must_use]
    pub fn next(self, event: PodEvent) -> Self {
        match (self, event) {
            (Self::Terminated, _) => Self::Terminated,
            (Self::Terminating { grace: g }, PodEvent::Deleted { grace }) => Self::Terminating {
                grace: g.min(grace),
            },
            (Self::Terminating { .. }, PodEvent::TornDown) => Self::Terminated,
            (s @ Self::Terminating { .. }, _) => s,
            (_, PodEvent::Deleted { grace }) => Self::Terminating { grace },
            (s @ Self::Completed { .. }, _) => s,
            (_, PodEvent::SandboxMissing) => Self::Pending,
            (_, PodEvent::InitRunning) => Self::Initializing,
            (_, PodEvent::Initialized) => Self::Running,
            (_, PodEvent::Finished { succeeded }) => Self::Completed { succeeded },
            (s, PodEvent::TornDown) => s,
        }
    }

    /// Whether the pod is being or has been torn down.
    pub fn is_terminating(&self) -> bool {
        matches!(self, Self::Terminating { .. } | Self::Terminated)
    }

    /// Whether the pod is done and its containers are no longer managed.
    pub fn is_completed(&self) -> bool {
        matches!(self, Self::Completed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_moves_every_live_state_to_terminating() {
        let g = Duration::from_secs(5);
        for s in [
            PodState::Pending,
            PodState::Initializing,
            PodState::Running,
            PodState::Completed { succeeded: true },
        ] {
            assert_eq!(
                s.next(PodEvent::Deleted { grace: g }),
                PodState::Terminating { grace: g }
            );
        }
        let t = PodState::Terminating {
            grace: Duration::from_secs(30),
        };
        assert_eq!(
            t.next(PodEvent::Deleted { grace: g }),
            PodState::Terminating { grace: g },
            "a shorter grace wins"
        );
        let terminated = PodState::Terminated;
        assert_eq!(
            terminated.next(PodEvent::Deleted { grace: g }),
            PodState::Terminated
        );
    }

    #[test]
    fn live_states_follow_the_sync() {
        use PodEvent::{Finished, InitRunning, Initialized, SandboxMissing, TornDown};
        let s = PodState::initial(None);
        assert_eq!(s, PodState::Pending);
        let s = s.next(InitRunning);
        assert_eq!(s, PodState::Initializing);
        let s = s.next(Initialized);
        assert_eq!(s, PodState::Running);
        assert_eq!(s.clone().next(SandboxMissing), PodState::Pending);
        let done = s.next(Finished { succeeded: false });
        assert_eq!(done, PodState::Completed { succeeded: false });
        assert_eq!(
            done.clone().next(SandboxMissing),
            done,
            "completed stays completed"
        );
        assert_eq!(
            done.clone().next(TornDown),
            done,
            "only terminating is torn down"
        );
        let t = PodState::Terminating {
            grace: Duration::ZERO,
        };
        assert_eq!(
            t.clone().next(Initialized),
            t,
            "terminating ignores the sync"
        );
        assert_eq!(t.next(TornDown), PodState::Terminated);
        assert_eq!(
            PodState::initial(Some("Succeeded")),
            PodState::Completed { succeeded: true }
        );
        assert_eq!(
            PodState::initial(Some("Failed")),
            PodState::Completed { succeeded: false }
        );
    }
}
