//! The explicit lifecycle of one pod, and the per-container state the worker keeps across
//! syncs (back-off included), after krustlet's state machine and the kubelet's pod worker.
//!
//! ```text
//! Pending --sandbox+volumes--> Initializing --init containers exit 0--> Running
//!    |                              | init fails, restartPolicy Never         | no container will
//!    |                              v                                         v restart again
//!    |                           Completed{succeeded: false}  <----------  Completed{succeeded}
//!    +-- any state: deletionTimestamp or cloud delete --> Terminating --> Terminated
//! ```

use std::time::Duration;

use tokio::time::Instant;

use super::backoff::Backoff;
use crate::edged::probe::ProbeKind;

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

impl PodState {
    /// The state after a deletion request: Terminating from any live state.
    pub fn delete(self, grace: Duration) -> Self {
        match self {
            Self::Terminating { grace: g } => Self::Terminating {
                grace: g.min(grace),
            },
            Self::Terminated => Self::Terminated,
            _ => Self::Terminating { grace },
        }
    }

    /// Whether the pod is being or has been torn down.
    pub fn is_terminating(&self) -> bool {
        matches!(self, Self::Terminating { .. } | Self::Terminated)
    }
}

/// A waiting reason and message as reported in `state.waiting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// E.g. `ContainerCreating`, `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`,
    /// `ErrImageNeverPull`, `CreateContainerConfigError`, `RunContainerError`.
    pub reason: String,
    /// Detail.
    pub message: String,
}

/// What the worker remembers about one container of the spec.
#[derive(Debug, Clone)]
pub struct ContainerTrack {
    /// Crash-loop back-off (restarts after exits).
    pub crash: Backoff,
    /// Back-off of failed starts (image pulls, config errors, start errors).
    pub start: Backoff,
    /// Why the container is not running, when no running instance says otherwise.
    pub waiting: Option<Waiting>,
    /// The earliest next start attempt.
    pub retry_at: Option<Instant>,
    /// The exited instance the current `retry_at` was computed for.
    pub handled_exit: Option<String>,
    /// The running instance registered with the prober.
    pub probed: Option<String>,
    /// Instance to kill, and the probe that failed (liveness or startup).
    pub kill: Option<(String, ProbeKind)>,
    /// The restart count the next instance gets at least (survives removed instances).
    pub next_restart: u32,
}

impl ContainerTrack {
    /// A container never seen before.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            crash: Backoff::new(initial, max),
            start: Backoff::new(initial, max),
            waiting: None,
            retry_at: None,
            handled_exit: None,
            probed: None,
            kill: None,
            next_restart: 0,
        }
    }

    /// Whether a start may be attempted now.
    pub fn may_start(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
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
            assert_eq!(s.delete(g), PodState::Terminating { grace: g });
        }
        let t = PodState::Terminating {
            grace: Duration::from_secs(30),
        };
        assert_eq!(
            t.delete(g),
            PodState::Terminating { grace: g },
            "a shorter grace wins"
        );
        assert_eq!(PodState::Terminated.delete(g), PodState::Terminated);
    }
}
