//! [`ContainerTrack`]: what the worker remembers about one container of the spec between
//! syncs, and its transitions. The phase ([`ContainerPhase`]) is the container's state as
//! this worker drives it; the observed instance (running, created, exited or none) is the
//! input of each transition, which answers what to do next ([`ExitDecision`]).
//!
//! ```text
//!            start ok                      exit, policy restarts
//!   Idle ------------> Running{id} ---------------------------------> BackOff{until}
//!    |  ^                   | exit, policy does not restart             |   |
//!    |  |                   v                                          |   | until passed:
//!    |  |                 Done                                         |   | start again
//!    |  +------------------------------- start ok <--------------------+   |
//!    +-- start fails (image, config, create, run) --> BackOff{until} <------+ start fails
//! ```
//!
//! Crash-loop back-off (kubelet: 10 s doubling to 300 s, reset after 10 min of running) and
//! start back-off are kept here, per container.

use std::time::Duration;

use tokio::time::Instant;

use super::reasons::{Waiting, WaitingReason};
use crate::pod_worker::backoff::Backoff;
use crate::pod_worker::observe::Instance;
use crate::probe::ProbeKind;

/// How long `ErrImagePull` is shown before the container's waiting reason becomes
/// `ImagePullBackOff` (the worker syncs again after it).
pub const SHOW_PULL_ERROR: Duration = Duration::from_secs(1);

/// Where one container of the spec is, as its worker drives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerPhase {
    /// Nothing holds the next start back; `waiting` says why nothing runs yet (e.g.
    /// `ContainerCreating` while volumes cannot be set up).
    Idle {
        /// Why it is not running, if known.
        waiting: Option<Waiting>,
    },
    /// Instance `id` runs.
    Running {
        /// Its id.
        id: String,
        /// Whether it is registered with the prober.
        probed: bool,
    },
    /// No start before `until`: crash-loop back-off after an exit, or start back-off after a
    /// failed start (image pull, config, create or run error).
    BackOff {
        /// The earliest next start.
        until: Instant,
        /// Why it waits (`CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`, ...).
        waiting: Option<Waiting>,
    },
    /// It exited and the restart policy does not start it again.
    Done,
}

/// What the worker does next with a container that exited or has no instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitDecision {
    /// Start instance `restart_count` now.
    Start {
        /// The restart count of the new instance.
        restart_count: u32,
    },
    /// Wait until `until`; `reason` says why (the worker records the kubelet's `BackOff`
    /// events for `CrashLoopBackOff` and `ImagePullBackOff`).
    BackOff {
        /// The earliest next start.
        until: Instant,
        /// The waiting reason now shown.
        reason: Option<WaitingReason>,
    },
    /// Leave it exited for good; `ok` = exit code 0.
    Done {
        /// Whether it exited 0.
        ok: bool,
    },
}

/// What the worker remembers about one container of the spec (lost when edgecore
/// restarts: containers found then are adopted with fresh back-off).
#[derive(Debug, Clone)]
pub struct ContainerTrack {
    /// Where the container is.
    phase: ContainerPhase,
    /// Crash-loop back-off (restarts after exits).
    crash: Backoff,
    /// Back-off of failed starts (image pulls, config errors, start errors).
    start: Backoff,
    /// The exited instance whose crash-loop back-off was last computed (each exit counts
    /// once).
    handled_exit: Option<String>,
    /// The restart count the next instance gets at least (survives removed instances).
    next_restart: u32,
    /// Instance to kill, and the probe that failed (liveness or startup).
    kill: Option<(String, ProbeKind)>,
}

impl ContainerTrack {
    /// A container never seen before; back-offs start at `initial` and double to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            phase: ContainerPhase::Idle { waiting: None },
            crash: Backoff::new(initial, max),
            start: Backoff::new(initial, max),
            handled_exit: None,
            next_restart: 0,
            kill: None,
        }
    }

    /// Its phase.
    #[cfg(test)]
    pub fn phase(&self) -> &ContainerPhase {
        &self.phase
    }

    /// Why it is not running (shown when no instance runs).
    pub fn waiting(&self) -> Option<&Waiting> {
        match &self.phase {
            ContainerPhase::Idle { waiting } | ContainerPhase::BackOff { waiting, .. } => {
                waiting.as_ref()
            }
            ContainerPhase::Running { .. } | ContainerPhase::Done => None,
        }
    }

    /// The restart count of the next instance (and of the status while none exists).
    pub fn next_restart(&self) -> u32 {
        self.next_restart
    }

    /// Shows `waiting` until the next transition (e.g. `ContainerCreating` while the pod's
    /// volumes cannot be set up); a back-off keeps its deadline.
    pub fn set_waiting(&mut self, waiting: Waiting) {
        match &mut self.phase {
            ContainerPhase::BackOff { waiting: w, .. } => *w = Some(waiting),
            _ => {
                self.phase = ContainerPhase::Idle {
                    waiting: Some(waiting),
                }
            }
        }
    }

    /// A liveness or startup probe failed for instance `id`: kill it at the next sync.
    pub fn request_kill(&mut self, id: String, probe: ProbeKind) {
        self.kill = Some((id, probe));
    }

    /// An instance with restart count `restart_count` exists (or existed): later ones count
    /// on from it.
    pub fn saw_instance(&mut self, restart_count: u32) {
        self.next_restart = self.next_restart.max(restart_count + 1);
    }

    /// Instance `id` runs. Returns the probe whose failure asks to kill it, if any (the
    /// worker stops it); the instance stays registered with the prober until it exits.
    pub fn on_running(&mut self, id: &str) -> Option<ProbeKind> {
        let probed =
            matches!(&self.phase, ContainerPhase::Running { id: r, probed: true } if r == id);
        self.phase = ContainerPhase::Running {
            id: id.to_owned(),
            probed,
        };
        self.kill.take_if(|(k, _)| k == id).map(|(_, probe)| probe)
    }

    /// Registers the running instance with the prober; returns its id if it was not yet.
    pub fn probe(&mut self) -> Option<String> {
        match &mut self.phase {
            ContainerPhase::Running { id, probed } if !*probed => {
                *probed = true;
                Some(id.clone())
            }
            _ => None,
        }
    }

    /// Instance `exited` ended (`restarts`: whether the restart policy starts it again;
    /// `since`: how long ago it exited, e.g. while edgecore was down; `pod`: the pod as the
    /// kubelet names it in messages, `<name>_<namespace>(<uid>)`). Each exit advances the
    /// crash-loop back-off once; the first restart is immediate.
    pub fn on_exit(
        &mut self,
        exited: &Instance,
        restarts: bool,
        since: Duration,
        now: Instant,
        pod: &str,
    ) -> ExitDecision {
        if !restarts {
            self.phase = ContainerPhase::Done;
            return ExitDecision::Done {
                ok: exited.exit_code == 0,
            };
        }
        if self.handled_exit.as_deref() != Some(exited.id.as_str()) {
            let delay = self.crash.next_delay(exited.ran_for());
            self.phase = ContainerPhase::BackOff {
                until: now + delay.saturating_sub(since),
                waiting: self.waiting().cloned(),
            };
            self.handled_exit = Some(exited.id.clone());
            self.saw_instance(exited.labels.restart_count);
        }
        match &self.phase {
            ContainerPhase::BackOff { until, .. } if now < *until => {
                let until = *until;
                let message = format!(
                    "back-off {}s restarting failed container={} pod={pod}",
                    self.crash.last().as_secs(),
                    exited.labels.container,
                );
                let reason = WaitingReason::CrashLoopBackOff;
                self.phase = ContainerPhase::BackOff {
                    until,
                    waiting: Some(Waiting { reason, message }),
                };
                ExitDecision::BackOff {
                    until,
                    reason: Some(reason),
                }
            }
            _ => ExitDecision::Start {
                restart_count: self.next_restart,
            },
        }
    }

    /// Whether the instance that exited is registered with the prober (then it no longer is;
    /// the worker removes its probes).
    pub fn unprobe(&mut self, exited: &str) -> bool {
        match &mut self.phase {
            ContainerPhase::Running { id, probed } if *probed && id == exited => {
                *probed = false;
                true
            }
            _ => false,
        }
    }

    /// No instance exists: start one, unless a start back-off holds it (an `ErrImagePull`
    /// then shows as `ImagePullBackOff`, kubelet).
    pub fn on_absent(&mut self, now: Instant) -> ExitDecision {
        match &mut self.phase {
            ContainerPhase::BackOff { until, waiting } if now < *until => {
                if let Some(w) = waiting
                    .as_mut()
                    .filter(|w| w.reason == WaitingReason::ErrImagePull)
                {
                    w.reason = WaitingReason::ImagePullBackOff;
                }
                ExitDecision::BackOff {
                    until: *until,
                    reason: waiting.as_ref().map(|w| w.reason),
                }
            }
            _ => ExitDecision::Start {
                restart_count: self.next_restart,
            },
        }
    }

    /// Instance `id` with `restart_count` was started: the start back-off starts over.
    pub fn started(&mut self, id: String, restart_count: u32) {
        self.phase = ContainerPhase::Running { id, probed: false };
        self.next_restart = restart_count;
        self.start.reset();
    }

    /// A start failed with `waiting`: back off (at least the initial delay). Returns when the
    /// worker should sync again: after [`SHOW_PULL_ERROR`] for `ErrImagePull` (to show
    /// `ImagePullBackOff`), else when the back-off ends.
    pub fn start_failed(&mut self, waiting: Waiting, now: Instant) -> Instant {
        let delay = self.start.next_delay(None).max(self.start.initial());
        let wake = if waiting.reason == WaitingReason::ErrImagePull {
            now + SHOW_PULL_ERROR
        } else {
            now + delay
        };
        self.phase = ContainerPhase::BackOff {
            until: now + delay,
            waiting: Some(waiting),
        };
        wake
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::pod_worker::observe::RunState;
    use verge_container_runtime::labels::{ContainerLabels, PodRef};

    const S: Duration = Duration::from_secs(1);

    fn exited(id: &str, restart_count: u32, ran_for_s: i64) -> Instance {
        let at = |s: i64| Some(Time(Timestamp::from_second(1_000_000 + s).expect("time")));
        Instance {
            id: id.into(),
            labels: ContainerLabels {
                pod: PodRef {
                    namespace: "ns".into(),
                    name: "web".into(),
                    uid: "u".into(),
                },
                container: "app".into(),
                restart_count,
                sandbox: false,
                pod_ip: None,
            },
            state: RunState::Exited,
            exit_code: 1,
            oom_killed: false,
            error: None,
            started_at: at(0),
            finished_at: at(ran_for_s),
            image: "img".into(),
            image_id: "sha256:img".into(),
            ip: None,
            resources: Default::default(),
        }
    }

    fn waiting(reason: WaitingReason) -> Waiting {
        Waiting {
            reason,
            message: "m".into(),
        }
    }

    #[test]
    fn exits_restart_at_once_then_back_off_and_count_once_each() {
        let now = Instant::now();
        let mut t = ContainerTrack::new(10 * S, 300 * S);
        let first = exited("a", 0, 1);
        let start = ExitDecision::Start { restart_count: 1 };
        assert_eq!(t.on_exit(&first, true, Duration::ZERO, now, "p"), start);
        t.started("b".into(), 1);
        let second = exited("b", 1, 1);
        let backoff = ExitDecision::BackOff {
            until: now + 10 * S,
            reason: Some(WaitingReason::CrashLoopBackOff),
        };
        assert_eq!(t.on_exit(&second, true, Duration::ZERO, now, "p"), backoff);
        let message = t.waiting().map(|w| w.message.as_str());
        assert_eq!(
            message,
            Some("back-off 10s restarting failed container=app pod=p")
        );
        // The same exit seen again does not advance the back-off.
        assert_eq!(t.on_exit(&second, true, Duration::ZERO, now, "p"), backoff);
        let later = now + 10 * S;
        let start = ExitDecision::Start { restart_count: 2 };
        assert_eq!(t.on_exit(&second, true, Duration::ZERO, later, "p"), start);
        // Time passed since the exit (edgecore was down) counts against the delay.
        t.started("c".into(), 2);
        let third = exited("c", 2, 1);
        let d = t.on_exit(&third, true, 15 * S, later, "p");
        assert_eq!(
            d,
            ExitDecision::BackOff {
                until: later + 5 * S,
                reason: Some(WaitingReason::CrashLoopBackOff)
            }
        );
        // A container the policy does not restart is done.
        let done = t.on_exit(&exited("d", 3, 1), false, Duration::ZERO, later, "p");
        assert_eq!(done, ExitDecision::Done { ok: false });
        assert_eq!(t.waiting(), None);
    }

    #[test]
    fn failed_pulls_show_err_image_pull_then_image_pull_back_off() {
        let now = Instant::now();
        let mut t = ContainerTrack::new(10 * S, 300 * S);
        let wake = t.start_failed(waiting(WaitingReason::ErrImagePull), now);
        assert_eq!(wake, now + SHOW_PULL_ERROR);
        let d = t.on_absent(now + SHOW_PULL_ERROR);
        assert_eq!(
            d,
            ExitDecision::BackOff {
                until: now + 10 * S,
                reason: Some(WaitingReason::ImagePullBackOff)
            }
        );
        // Volumes failing meanwhile change what is shown, not when the next start is.
        t.set_waiting(waiting(WaitingReason::ContainerCreating));
        let reason = t.waiting().map(|w| w.reason);
        assert_eq!(reason, Some(WaitingReason::ContainerCreating));
        let start = ExitDecision::Start { restart_count: 0 };
        assert_eq!(t.on_absent(now + 10 * S), start);
        // Another failure: the start back-off is at least the initial delay, then doubles.
        let wake = t.start_failed(waiting(WaitingReason::RunContainerError), now);
        assert_eq!(wake, now + 10 * S);
        let wake = t.start_failed(waiting(WaitingReason::RunContainerError), now);
        assert_eq!(wake, now + 20 * S);
        t.started("x".into(), 0);
        let wake = t.start_failed(waiting(WaitingReason::RunContainerError), now);
        assert_eq!(
            wake,
            now + 10 * S,
            "a successful start resets the start back-off"
        );
    }

    #[test]
    fn running_instances_are_probed_once_and_killed_on_request() {
        let mut t = ContainerTrack::new(10 * S, 300 * S);
        assert_eq!(t.on_running("a"), None);
        assert_eq!(t.probe().as_deref(), Some("a"));
        assert_eq!(t.on_running("a"), None);
        assert_eq!(t.probe(), None, "registered once per instance");
        t.request_kill("old".into(), ProbeKind::Liveness);
        assert_eq!(
            t.on_running("a"),
            None,
            "a kill of another instance is kept"
        );
        t.request_kill("a".into(), ProbeKind::Startup);
        assert_eq!(t.on_running("a"), Some(ProbeKind::Startup));
        assert!(t.unprobe("a"), "its probes go when it exits");
        assert!(!t.unprobe("a"));
    }
}
