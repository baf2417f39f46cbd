//! The probe state machine under paused time, with a scripted [`ProbeHandler`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ExecAction, Probe};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::time::sleep;

use super::*;

/// Answers each kind's attempts from a script (then repeats its last answer), counts calls;
/// a `None` answer hangs (to exercise the timeout).
#[derive(Default)]
struct Fake {
    script: Mutex<HashMap<ProbeKind, VecDeque<Option<bool>>>>,
    calls: Mutex<HashMap<ProbeKind, usize>>,
}

impl Fake {
    fn with(script: &[(ProbeKind, &[Option<bool>])]) -> Self {
        let fake = Self::default();
        for (kind, answers) in script {
            fake.lock_script()
                .insert(*kind, answers.iter().copied().collect());
        }
        fake
    }

    fn lock_script(&self) -> std::sync::MutexGuard<'_, HashMap<ProbeKind, VecDeque<Option<bool>>>> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next(&self, kind: ProbeKind) -> Option<bool> {
        *self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default() += 1;
        let mut script = self.lock_script();
        let answers = script.entry(kind).or_default();
        if answers.len() > 1 {
            answers.pop_front().flatten()
        } else {
            answers.front().copied().flatten()
        }
    }
}

impl ProbeHandler for Arc<Fake> {
    async fn run(
        &self,
        kind: ProbeKind,
        _: &ProbeTarget,
        _: &Container,
        _: &Probe,
    ) -> ProbeOutcome {
        match self.next(kind) {
            Some(true) => ProbeOutcome::success(),
            Some(false) => ProbeOutcome::failure("scripted failure"),
            None => std::future::pending().await,
        }
    }
}

fn calls(fake: &Fake, kind: ProbeKind) -> usize {
    fake.calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&kind)
        .copied()
        .unwrap_or(0)
}

fn probe(initial: i32, period: i32, success: i32, failure: i32) -> Option<Probe> {
    Some(Probe {
        exec: Some(ExecAction {
            command: Some(vec!["true".into()]),
        }),
        initial_delay_seconds: Some(initial),
        period_seconds: Some(period),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        ..Probe::default()
    })
}

fn target() -> ProbeTarget {
    ProbeTarget {
        namespace: "ns".into(),
        pod: "p".into(),
        pod_uid: "uid".into(),
        container: "app".into(),
        container_id: "cid".into(),
        pod_ip: None,
    }
}

fn updates(rx: &mut broadcast::Receiver<ProbeUpdate>) -> Vec<(ProbeKind, bool)> {
    let mut out = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(u) => out.push((u.kind, u.success)),
            Err(TryRecvError::Empty | TryRecvError::Closed) => return out,
            Err(TryRecvError::Lagged(_)) => {}
        }
    }
}

const MS: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn no_probes_means_started_and_ready() {
    let m = ProbeManager::with_handler(Arc::new(Fake::default()));
    assert!(!m.ready("uid", "app"));
    m.add(
        target(),
        &Container {
            name: "app".into(),
            ..Container::default()
        },
    );
    assert!(m.started("uid", "app") && m.ready("uid", "app"));
    m.remove_pod("uid");
    assert!(!m.started("uid", "app") && !m.ready("uid", "app"));
}

#[tokio::test(start_paused = true)]
async fn readiness_waits_for_initial_delay_and_success_threshold() {
    let fake = Arc::new(Fake::with(&[(ProbeKind::Readiness, &[Some(true)])]));
    let m = ProbeManager::with_handler(Arc::clone(&fake));
    let mut rx = m.subscribe();
    let c = Container {
        readiness_probe: probe(5, 10, 2, 3),
        ..Container::default()
    };
    m.add(target(), &c);
    sleep(Duration::from_secs(5) - MS).await;
    assert_eq!(calls(&fake, ProbeKind::Readiness), 0, "initial delay");
    sleep(2 * MS).await; // t = 5.1s: first success
    assert_eq!(calls(&fake, ProbeKind::Readiness), 1);
    assert!(!m.ready("uid", "app"), "one success of two");
    sleep(Duration::from_secs(10)).await; // t = 15.1s: second success
    assert!(m.ready("uid", "app"));
    assert_eq!(updates(&mut rx), [(ProbeKind::Readiness, true)]);
    // Failures flip it back only after failureThreshold (3) in a row.
    fake.lock_script()
        .insert(ProbeKind::Readiness, [Some(false)].into());
    sleep(Duration::from_secs(20)).await; // two failures
    assert!(m.ready("uid", "app"));
    sleep(Duration::from_secs(10)).await; // third
    assert!(!m.ready("uid", "app"));
    assert_eq!(updates(&mut rx), [(ProbeKind::Readiness, false)]);
}

#[tokio::test(start_paused = true)]
async fn liveness_failure_is_published_once_then_holds() {
    let fake = Arc::new(Fake::with(&[(
        ProbeKind::Liveness,
        &[Some(false), Some(true), Some(false)],
    )]));
    let m = ProbeManager::with_handler(Arc::clone(&fake));
    let mut rx = m.subscribe();
    m.add(
        target(),
        &Container {
            liveness_probe: probe(0, 1, 1, 2),
            ..Container::default()
        },
    );
    // Attempts at 0s (fail), 1s (ok: run resets), 2s (fail), 3s (fail => published).
    sleep(Duration::from_secs(2) + MS).await;
    assert!(updates(&mut rx).is_empty());
    sleep(Duration::from_secs(1)).await;
    let got = rx.try_recv();
    assert!(
        matches!(&got, Ok(u) if u.kind == ProbeKind::Liveness && !u.success && u.container_id == "cid"
        && u.message == "scripted failure"),
        "{got:?}"
    );
    sleep(Duration::from_secs(10)).await;
    assert_eq!(
        calls(&fake, ProbeKind::Liveness),
        4,
        "on hold after the failure"
    );
}

#[tokio::test(start_paused = true)]
async fn startup_gates_liveness_and_readiness() {
    let startup: &[Option<bool>] = &[Some(false), Some(false), Some(true)];
    let fake = Arc::new(Fake::with(&[
        (ProbeKind::Startup, startup),
        (ProbeKind::Liveness, &[Some(true)]),
        (ProbeKind::Readiness, &[Some(true)]),
    ]));
    let m = ProbeManager::with_handler(Arc::clone(&fake));
    let mut rx = m.subscribe();
    let c = Container {
        startup_probe: probe(0, 1, 1, 5),
        liveness_probe: probe(0, 3, 1, 3),
        readiness_probe: probe(0, 3, 1, 3),
        ..Container::default()
    };
    m.add(target(), &c);
    sleep(Duration::from_secs(1) + MS).await;
    assert!(!m.started("uid", "app") && !m.ready("uid", "app"));
    assert_eq!(
        (
            calls(&fake, ProbeKind::Liveness),
            calls(&fake, ProbeKind::Readiness)
        ),
        (0, 0)
    );
    // t = 2.1s: the third startup attempt succeeded, and readiness ran at once (the kubelet's
    // manual trigger), not at its next 3 s tick; liveness waits for its tick.
    sleep(Duration::from_secs(1)).await;
    assert!(m.started("uid", "app") && m.ready("uid", "app"));
    assert_eq!(
        updates(&mut rx),
        [(ProbeKind::Startup, true), (ProbeKind::Readiness, true)]
    );
    assert_eq!(calls(&fake, ProbeKind::Liveness), 0);
    sleep(Duration::from_secs(1)).await; // t = 3.1s: liveness ticks at 3s
    assert_eq!(
        calls(&fake, ProbeKind::Startup),
        3,
        "startup stops after success"
    );
    assert_eq!(calls(&fake, ProbeKind::Liveness), 1);
    assert_eq!(calls(&fake, ProbeKind::Readiness), 1, "the period restarts");
}

#[tokio::test(start_paused = true)]
async fn startup_failure_and_timeouts_are_failures() {
    let fake = Arc::new(Fake::with(&[(ProbeKind::Startup, &[None])]));
    let m = ProbeManager::with_handler(Arc::clone(&fake));
    let mut rx = m.subscribe();
    m.add(
        target(),
        &Container {
            startup_probe: probe(0, 10, 1, 2),
            ..Container::default()
        },
    );
    sleep(Duration::from_secs(11) + MS).await; // attempts at 0s and 10s, each timing out after 1s
    let got = rx.try_recv();
    assert!(
        matches!(&got, Ok(u) if u.kind == ProbeKind::Startup && !u.success
        && u.message.contains("timed out")),
        "{got:?}"
    );
    assert!(!m.started("uid", "app"));
}

#[tokio::test(start_paused = true)]
async fn removal_and_replacement_stop_the_tasks() {
    let fake = Arc::new(Fake::with(&[(ProbeKind::Readiness, &[Some(true)])]));
    let m = ProbeManager::with_handler(Arc::clone(&fake));
    let c = Container {
        readiness_probe: probe(0, 1, 1, 1),
        ..Container::default()
    };
    m.add(target(), &c);
    m.add(target(), &c); // replaces: one task left
    sleep(Duration::from_secs(2) + MS).await;
    assert_eq!(calls(&fake, ProbeKind::Readiness), 3);
    m.remove_container("uid", "app");
    sleep(Duration::from_secs(5)).await;
    assert_eq!(calls(&fake, ProbeKind::Readiness), 3);
    assert!(!m.ready("uid", "app"));
}
