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

/// A pod of its own name and uid (the harness's [`pod`] are all `web`, `u-1`).
fn named(name: &str, uid: &str, spec: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    let mut p = pod(spec);
    p.metadata.name = Some(name.into());
    p.metadata.uid = Some(uid.into());
    p
}

/// An `Always` pod whose container binds host port `port`, requesting `cpu`.
fn serving(name: &str, uid: &str, port: i32, cpu: &str) -> k8s_openapi::api::core::v1::Pod {
    named(
        name,
        uid,
        json!({"restartPolicy": "Always", "containers": [{"name": "app", "image": IMAGE,
            "resources": {"requests": {"cpu": cpu}},
            "ports": [{"containerPort": 80, "hostPort": port}]}]}),
    )
}

/// Whether any container of pod `uid` exists.
fn created(h: &super::tests::Harness, uid: &str) -> bool {
    h.rt.containers().iter().any(|c| {
        c.info
            .labels
            .get(verge_container_runtime::labels::POD_UID)
            .map(String::as_str)
            == Some(uid)
    })
}

fn reported(
    w: &super::Worker<verge_container_runtime::fake::FakeRuntime>,
) -> (String, String, String) {
    let s = w.last_status.clone().expect("status reported");
    (
        s.phase.unwrap_or_default(),
        s.reason.unwrap_or_default(),
        s.message.unwrap_or_default(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_host_port_is_taken_is_rejected_for_good_with_the_kubelets_reason() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let mut first = h.worker(&serving("first", "u-1", 21017, "100m"));
    settle(&mut first).await;
    assert_eq!(first.state, PodState::Running);
    let mut second = h.worker(&serving("second", "u-2", 21017, "100m"));
    settle(&mut second).await;
    let message = crate::admission::fit::NODE_PORTS_MESSAGE;
    assert_eq!(
        reported(&second),
        (
            "Failed".to_owned(),
            "NodePorts".to_owned(),
            format!("Pod was rejected: {message}")
        )
    );
    assert!(!created(&h, "u-2"), "nothing created");
    let events = h.events();
    assert!(
        events.iter().any(|(r, m)| r == "NodePorts" && m == message),
        "{events:?}"
    );
    // The port is freed once the first pod is gone; the rejected pod stays failed.
    first.apply(WorkerMsg::Deleted);
    first.sync().await.expect("sync");
    assert_eq!(first.state, PodState::Terminated);
    assert!(!h.ctx.admitted.contains("u-1"));
    settle(&mut second).await;
    assert!(
        matches!(second.state, PodState::Rejected(_)),
        "rejected once"
    );
    assert!(!created(&h, "u-2"));
    let mut third = h.worker(&serving("third", "u-3", 21017, "100m"));
    settle(&mut third).await;
    assert_eq!(third.state, PodState::Running, "the port is free");
}

#[tokio::test(start_paused = true)]
async fn a_pod_past_the_allocatable_cpu_is_rejected_until_an_admitted_pod_completes() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let job = |name: &str, uid: &str, cpu: &str| {
        named(
            name,
            uid,
            json!({"restartPolicy": "Never", "containers": [{"name": "app", "image": IMAGE,
                "resources": {"requests": {"cpu": cpu}}}]}),
        )
    };
    let mut big = h.worker(&job("big", "u-1", "3"));
    settle(&mut big).await;
    assert_eq!(big.state, PodState::Running);
    let mut late = h.worker(&job("late", "u-2", "1500m"));
    settle(&mut late).await;
    let (phase, reason, message) = reported(&late);
    assert_eq!((phase.as_str(), reason.as_str()), ("Failed", "OutOfcpu"));
    assert_eq!(
        message,
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 1500, used: \
         3000, capacity: 4000"
    );
    // A completed pod no longer holds its share.
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.exit(&app.info.id, 0);
    settle(&mut big).await;
    assert_eq!(big.state, PodState::Completed { succeeded: true });
    let mut next = h.worker(&job("next", "u-3", "1500m"));
    settle(&mut next).await;
    assert_eq!(next.state, PodState::Running);
}

#[tokio::test(start_paused = true)]
async fn pods_restored_after_a_restart_are_not_rejected_for_each_other() {
    let h = harness();
    h.rt.add_image(IMAGE);
    // Both ran before the restart (say, the second was admitted while the first was held
    // back); neither is rejected now, but a new pod is weighed against them.
    let running = |mut p: k8s_openapi::api::core::v1::Pod| {
        p.status = Some(serde_json::from_value(json!({"phase": "Running"})).expect("status"));
        p
    };
    let (a, b) = (
        running(serving("a", "u-1", 8080, "100m")),
        running(serving("b", "u-2", 8080, "100m")),
    );
    h.ctx.admitted.restore([&a, &b]);
    let (mut wa, mut wb) = (h.worker(&a), h.worker(&b));
    settle(&mut wa).await;
    settle(&mut wb).await;
    assert_eq!(
        (&wa.state, &wb.state),
        (&PodState::Running, &PodState::Running)
    );
    let mut new = h.worker(&serving("new", "u-3", 8080, "100m"));
    settle(&mut new).await;
    assert_eq!(reported(&new).1, "NodePorts");
    // A restored pod's worker holds its share: it is freed when the worker ends.
    drop(wa);
    assert!(!h.ctx.admitted.contains("u-1"));
    assert!(h.ctx.admitted.contains("u-2"));
}

/// The `Failed` status of a pod deleted before its container ran (kubelet:
/// `TerminatePod`): the container terminated, end unknown.
fn assert_failed_unknown(w: &super::Worker<verge_container_runtime::fake::FakeRuntime>) {
    use crate::status::terminal::{UNKNOWN_MESSAGE, UNKNOWN_REASON};
    assert_eq!(reported(w).0, "Failed");
    let app = super::tests::status(w, "app")
        .state
        .and_then(|s| s.terminated);
    let app = app.expect("terminated");
    assert_eq!(
        (app.reason.as_deref(), app.message.as_deref(), app.exit_code),
        (Some(UNKNOWN_REASON), Some(UNKNOWN_MESSAGE), 137)
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_before_it_ran_ends_failed_before_its_deletion_is_reported() {
    use verge_core::Operation;
    use verge_proto::{Message, MessageExt as _};
    let mut h = super::tests::harness_reporting();
    h.rt.add_image(IMAGE);
    let manager = h.status_manager.take().expect("manager");
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    let mut p = app_pod("OnFailure");
    p.metadata.finalizers = Some(vec!["batch.kubernetes.io/job-tracking".into()]);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        verge_edge_store::clock::now(),
    ));
    p.status = Some(serde_json::from_value(json!({"phase": "Pending"})).expect("status"));
    let mut w = h.worker(&p);
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    assert!(!created(&h, "u-1"), "nothing created");
    assert_failed_unknown(&w);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reports: Vec<(Operation, String, String)> = h
        .upstream()
        .into_iter()
        .map(Message::from)
        .filter(|m| !m.resource().contains("/event/"))
        .map(|m| {
            let phase = serde_json::from_slice::<k8s_openapi::api::core::v1::PodStatus>(&m.content)
                .ok()
                .and_then(|s| s.phase)
                .unwrap_or_default();
            (m.operation().expect("op"), m.resource().to_owned(), phase)
        })
        .collect();
    let report = |op, resource: &str, phase: &str| (op, resource.to_owned(), phase.to_owned());
    assert_eq!(
        reports,
        [
            report(Operation::Update, "default/podstatus/web", "Failed"),
            report(Operation::Delete, "default/pod/web", ""),
        ],
        "the terminal status, then the deletion"
    );
    stop.cancel();
    task.await.expect("join").expect("run");
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_while_its_image_cannot_be_pulled_ends_failed() {
    let h = harness();
    h.rt.fail_pull(IMAGE, "no such image");
    let mut w = h.worker(&app_pod("Never"));
    settle(&mut w).await;
    assert!(created(&h, "u-1"), "the sandbox runs");
    assert_eq!(reported(&w).0, "Pending");
    w.apply(WorkerMsg::Deleted);
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    assert_failed_unknown(&w);
    assert!(!created(&h, "u-1"), "everything removed");
}

#[tokio::test(start_paused = true)]
async fn a_running_always_pod_ends_failed_once_deleted_and_stopped() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let mut w = h.worker(&app_pod("Always"));
    settle(&mut w).await;
    assert_eq!(reported(&w).0, "Running");
    w.apply(WorkerMsg::Deleted);
    w.sync().await.expect("sync");
    assert_eq!(w.state, PodState::Terminated);
    assert_eq!(reported(&w).0, "Failed", "killed: exit code 137");
    let app = super::tests::status(&w, "app")
        .state
        .and_then(|s| s.terminated);
    assert_eq!(app.map(|t| t.exit_code), Some(137), "as it ended");
}
