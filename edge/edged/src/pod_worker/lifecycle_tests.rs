//! Deletion, rejection and eviction as states of the worker's pod lifecycle, against
//! [`FakeRuntime`](verge_container_runtime::fake::FakeRuntime): a deletion is a transition at
//! once, and a failed pod's reason survives until the pod is removed.

use std::time::Duration;

use serde_json::json;

use super::WorkerMsg;
use super::deadline;
use super::state::{Failure, PodState};
use super::tests::{IMAGE, app_pod, harness, pod, settle, started_a_minute_ago};

#[tokio::test(start_paused = true)]
async fn a_deletion_message_moves_the_pod_to_terminating_before_the_next_sync() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(
        json!({"restartPolicy": "Always", "terminationGracePeriodSeconds": 7,
        "containers": [{"name": "app", "image": IMAGE}]}),
    );
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert_eq!(w.state, PodState::Running);
    w.apply(WorkerMsg::Deleted);
    assert_eq!(
        w.state,
        PodState::Terminating {
            grace: Duration::from_secs(7),
            failure: None
        }
    );
    w.apply(WorkerMsg::Deleted);
    assert!(matches!(w.state, PodState::Terminating { .. }), "once");
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    assert!(h.rt.containers().is_empty(), "every container removed");
}

#[tokio::test(start_paused = true)]
async fn a_rejected_pod_is_removed_on_deletion_without_anything_created() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(json!({"containers": [{"name": "app", "image": IMAGE}],
        "os": {"name": "windows"}}));
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let PodState::Rejected(Failure { reason, .. }) = &w.state else {
        panic!("not rejected: {:?}", w.state);
    };
    assert_eq!(*reason, "PodOSNotSupported");
    let reported = w.last_status.clone();
    w.apply(WorkerMsg::Deleted);
    assert_eq!(
        w.state.failure().map(|f| f.reason),
        Some("PodOSNotSupported")
    );
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    assert!(h.rt.containers().is_empty(), "nothing ever created");
    assert_eq!(w.last_status, reported, "its last status stands");
}

#[tokio::test(start_paused = true)]
async fn an_evicted_pod_keeps_its_reason_while_it_terminates() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let mut p = app_pod("Always");
    started_a_minute_ago(&mut p);
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert_eq!(w.state, PodState::Running);
    p.spec.as_mut().expect("spec").active_deadline_seconds = Some(5);
    w.pod = std::sync::Arc::new(p);
    settle(&mut w).await;
    assert_eq!(
        w.state,
        PodState::Evicted(Failure::new(deadline::REASON, deadline::MESSAGE))
    );
    assert_eq!(h.rt.instances("app").len(), 1, "stopped, kept");
    assert_eq!(
        settle(&mut w).await,
        None,
        "an evicted pod is not run again"
    );
    assert_eq!(h.rt.instances("app").len(), 1, "not restarted");
    w.apply(WorkerMsg::Deleted);
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    let s = w.last_status.clone().expect("status");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some(deadline::REASON));
    assert_eq!(s.message.as_deref(), Some(deadline::MESSAGE));
    assert!(h.rt.containers().is_empty(), "every container removed");
}
