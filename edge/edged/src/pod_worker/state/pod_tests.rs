//! The pod lifecycle's transitions: the legal ones and where they lead, and the refusal of
//! every other (state, event) pair.

use super::*;

const SEC: Duration = Duration::from_secs(1);

fn sysctl() -> Failure {
    Failure::new("SysctlForbidden", "forbidden sysctl")
}

fn deadline() -> Failure {
    Failure::new("DeadlineExceeded", "past the deadline")
}

fn terminating(grace: Duration, failure: Option<Failure>) -> PodState {
    PodState::Terminating { grace, failure }
}

/// One state of each kind.
fn states() -> Vec<PodState> {
    vec![
        PodState::Pending,
        PodState::Initializing,
        PodState::Running,
        PodState::Completed { succeeded: true },
        PodState::Completed { succeeded: false },
        PodState::Rejected(sysctl()),
        PodState::Evicted(deadline()),
        terminating(30 * SEC, None),
        terminating(30 * SEC, Some(deadline())),
        PodState::Stopped { failure: None },
        PodState::Stopped {
            failure: Some(sysctl()),
        },
        PodState::Terminated,
    ]
}

/// One event of each kind.
fn events() -> Vec<PodEvent> {
    vec![
        PodEvent::SandboxMissing,
        PodEvent::InitRunning,
        PodEvent::Initialized,
        PodEvent::Finished { succeeded: true },
        PodEvent::Finished { succeeded: false },
        PodEvent::Rejected(sysctl()),
        PodEvent::Evicted(deadline()),
        PodEvent::Deleted { grace: 5 * SEC },
        PodEvent::Killed,
        PodEvent::TornDown,
    ]
}

/// Whether `event` is allowed in `state`, as the lifecycle's table says.
fn allowed(state: &PodState, event: &PodEvent) -> bool {
    use PodEvent as E;
    use PodState as S;
    match state {
        S::Pending => !matches!(event, E::Killed | E::TornDown),
        S::Initializing | S::Running => !matches!(event, E::Killed | E::TornDown | E::Rejected(_)),
        S::Completed { .. } | S::Rejected(_) | S::Evicted(_) => {
            matches!(event, E::Deleted { .. })
        }
        S::Terminating { .. } => matches!(event, E::Deleted { .. } | E::Killed),
        S::Stopped { .. } => matches!(event, E::Deleted { .. } | E::TornDown),
        S::Terminated => false,
    }
}

#[test]
fn every_state_allows_exactly_its_transitions_and_refuses_the_others_unchanged() {
    for state in states() {
        for event in events() {
            let result = state.clone().transition(event.clone());
            if allowed(&state, &event) {
                assert!(result.is_ok(), "{state:?} refused {event:?}: {result:?}");
            } else {
                let Err(refused) = result else {
                    panic!("{state:?} allowed {event:?}");
                };
                assert_eq!(refused.state, state, "the state stays as it was");
                assert_eq!(refused.event, event);
            }
        }
    }
}

#[test]
fn live_states_follow_the_sync() {
    use PodEvent::{Finished, InitRunning, Initialized, SandboxMissing};
    let s = PodState::initial(None);
    assert_eq!(s, PodState::Pending);
    let s = s.transition(InitRunning).expect("legal");
    assert_eq!(s, PodState::Initializing);
    let s = s.transition(Initialized).expect("legal");
    assert_eq!(s, PodState::Running);
    assert_eq!(
        s.clone().transition(SandboxMissing),
        Ok(PodState::Pending),
        "a lost sandbox is created again"
    );
    let done = s.transition(Finished { succeeded: false }).expect("legal");
    assert_eq!(done, PodState::Completed { succeeded: false });
    assert!(done.is_finished() && !done.is_terminating());
    assert_eq!(done.failure(), None);
    assert_eq!(
        PodState::initial(Some("Succeeded")),
        PodState::Completed { succeeded: true }
    );
    assert_eq!(
        PodState::initial(Some("Failed")),
        PodState::Completed { succeeded: false }
    );
    assert_eq!(PodState::initial(Some("Running")), PodState::Pending);
}

#[test]
fn deletion_moves_every_state_but_the_end_to_terminating() {
    let g = 5 * SEC;
    let deleted = || PodEvent::Deleted { grace: g };
    for s in [
        PodState::Pending,
        PodState::Initializing,
        PodState::Running,
        PodState::Completed { succeeded: true },
    ] {
        assert_eq!(s.transition(deleted()), Ok(terminating(g, None)));
    }
    assert_eq!(
        terminating(30 * SEC, None).transition(deleted()),
        Ok(terminating(g, None)),
        "a shorter grace wins"
    );
    assert_eq!(
        terminating(SEC, None).transition(deleted()),
        Ok(terminating(SEC, None)),
        "a longer grace does not"
    );
    assert!(PodState::Terminated.transition(deleted()).is_err());
}

#[test]
fn a_rejected_pod_was_never_started_and_keeps_its_failure_until_it_is_gone() {
    let rejected = PodState::Pending
        .transition(PodEvent::Rejected(sysctl()))
        .expect("admission happens while pending");
    assert_eq!(rejected, PodState::Rejected(sysctl()));
    assert!(rejected.is_finished());
    assert_eq!(rejected.failure(), Some(&sysctl()));
    for started in [PodState::Initializing, PodState::Running] {
        assert!(
            started.transition(PodEvent::Rejected(sysctl())).is_err(),
            "a started pod is not rejected"
        );
    }
    let refused = rejected
        .clone()
        .transition(PodEvent::SandboxMissing)
        .expect_err("a rejected pod is not run");
    assert_eq!(refused.state, rejected);
    let t = rejected
        .transition(PodEvent::Deleted { grace: SEC })
        .expect("deleted");
    assert_eq!(t, terminating(SEC, Some(sysctl())));
    assert_eq!(
        t.failure(),
        Some(&sysctl()),
        "still reported while terminating"
    );
    assert!(t.is_terminating() && !t.is_finished());
    let stopped = t.transition(PodEvent::Killed).expect("stopped");
    assert_eq!(
        stopped.failure(),
        Some(&sysctl()),
        "still reported once stopped"
    );
    let end = stopped.transition(PodEvent::TornDown).expect("torn down");
    assert_eq!(end, PodState::Terminated);
    assert_eq!(end.failure(), None);
}

#[test]
fn an_evicted_pod_is_done_and_keeps_its_failure_until_it_is_gone() {
    for live in [PodState::Pending, PodState::Initializing, PodState::Running] {
        let evicted = live
            .transition(PodEvent::Evicted(deadline()))
            .expect("a live pod is evicted");
        assert_eq!(evicted, PodState::Evicted(deadline()));
    }
    let evicted = PodState::Evicted(deadline());
    assert!(evicted.is_finished());
    assert_eq!(evicted.failure(), Some(&deadline()));
    for event in [
        PodEvent::Evicted(deadline()),
        PodEvent::Initialized,
        PodEvent::Finished { succeeded: false },
    ] {
        assert!(
            evicted.clone().transition(event).is_err(),
            "evicted once, not run again"
        );
    }
    assert!(
        PodState::Completed { succeeded: true }
            .transition(PodEvent::Evicted(deadline()))
            .is_err(),
        "a completed pod is not evicted"
    );
    let t = evicted
        .transition(PodEvent::Deleted { grace: 30 * SEC })
        .expect("deleted");
    assert_eq!(t, terminating(30 * SEC, Some(deadline())));
    let shorter = t
        .transition(PodEvent::Deleted { grace: SEC })
        .expect("deleted again");
    assert_eq!(
        shorter.failure(),
        Some(&deadline()),
        "kept when the grace shrinks"
    );
}

#[test]
fn only_active_pods_hold_their_share_of_the_node() {
    let active = |s: PodState| s.is_active();
    assert!(active(PodState::Pending) && active(PodState::Running));
    assert!(active(terminating(SEC, None)), "containers still to stop");
    for done in [
        PodState::Completed { succeeded: true },
        PodState::Rejected(sysctl()),
        PodState::Evicted(deadline()),
        PodState::Stopped { failure: None },
        PodState::Terminated,
    ] {
        assert!(!done.is_active(), "{done:?}");
    }
}

#[test]
fn only_a_stopped_pod_is_torn_down_and_the_end_allows_nothing() {
    for s in [
        PodState::Pending,
        PodState::Running,
        PodState::Completed { succeeded: true },
        PodState::Rejected(sysctl()),
        PodState::Evicted(deadline()),
        PodState::Terminated,
    ] {
        assert!(s.transition(PodEvent::TornDown).is_err());
    }
    let t = terminating(Duration::ZERO, None);
    assert!(
        t.clone().transition(PodEvent::Initialized).is_err(),
        "terminating ignores the sync"
    );
    assert!(
        t.clone().transition(PodEvent::TornDown).is_err(),
        "stopped first"
    );
    let stopped = t.transition(PodEvent::Killed).expect("stopped");
    assert_eq!(stopped, PodState::Stopped { failure: None });
    assert_eq!(
        stopped.clone().transition(PodEvent::Deleted { grace: SEC }),
        Ok(stopped.clone()),
        "nothing left to kill"
    );
    assert_eq!(
        stopped.transition(PodEvent::TornDown),
        Ok(PodState::Terminated)
    );
    for event in events() {
        assert!(PodState::Terminated.transition(event).is_err());
    }
}
