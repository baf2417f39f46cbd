//! Unit tests of what a container is created with and reports from its configuration:
//! termination messages (file and log fallback), the `runAsNonRoot` check and a grace period
//! shortened while the pod terminates, against
//! [`FakeRuntime`](verge_container_runtime::fake::FakeRuntime).

use serde_json::json;

use super::tests::{IMAGE, harness, pod, settle, status, waiting_reason};
use crate::termination_message;

fn terminated_message(
    w: &super::Worker<verge_container_runtime::fake::FakeRuntime>,
) -> Option<String> {
    let state = status(w, "app").state.expect("state");
    state.terminated.expect("terminated").message
}

#[tokio::test(start_paused = true)]
async fn the_termination_message_is_what_the_container_wrote_to_its_file() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(
        json!({"restartPolicy": "Never", "containers": [{"name": "app", "image": IMAGE,
        "terminationMessagePath": "/dev/termination-custom-log"}]}),
    );
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    let host = termination_message::host_path(&h.ctx.config.pods_dir().join("u-1"), "app", 0);
    let bind = format!("{}:/dev/termination-custom-log", host.display());
    assert!(app.spec.binds.contains(&bind), "{:?}", app.spec.binds);
    std::fs::write(&host, "DONE").expect("the container writes");
    h.rt.exit(&app.info.id, 0);
    settle(&mut w).await;
    assert_eq!(terminated_message(&w).as_deref(), Some("DONE"));
}

#[tokio::test(start_paused = true)]
async fn fallback_to_logs_on_error_takes_the_log_tail_of_a_failed_container() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let spec = |policy: &str| {
        pod(
            json!({"restartPolicy": policy, "containers": [{"name": "app", "image": IMAGE,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError"}]}),
        )
    };
    let mut w = h.worker(&spec("Never"));
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.set_logs(&app.info.id, "starting\nDONE\n");
    h.rt.exit(&app.info.id, 1);
    settle(&mut w).await;
    assert_eq!(terminated_message(&w).as_deref(), Some("starting\nDONE\n"));

    // A success with an empty file reports no message, whatever the log says.
    let h = harness();
    h.rt.add_image(IMAGE);
    let mut w = h.worker(&spec("Never"));
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.set_logs(&app.info.id, "DONE\n");
    h.rt.exit(&app.info.id, 0);
    settle(&mut w).await;
    assert_eq!(terminated_message(&w), None);
}

#[tokio::test(start_paused = true)]
async fn run_as_non_root_refuses_an_image_running_as_root() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(json!({"securityContext": {"runAsNonRoot": true},
        "containers": [{"name": "app", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("CreateContainerConfigError")
    );
    let message = status(&w, "app")
        .state
        .and_then(|s| s.waiting)
        .and_then(|w| w.message);
    assert_eq!(
        message.as_deref(),
        Some(
            "container has runAsNonRoot and image will run as root (pod: \"web_default(u-1)\", container: app)"
        )
    );
    assert!(h.rt.instances("app").is_empty(), "nothing created");

    // An explicit non-root user passes.
    let p = pod(
        json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
        "containers": [{"name": "app", "image": IMAGE}]}),
    );
    let h = harness();
    h.rt.add_image(IMAGE);
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert_eq!(h.rt.instances("app").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_grace_period_cuts_a_termination_in_progress() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(json!({"terminationGracePeriodSeconds": 200,
        "containers": [{"name": "app", "image": IMAGE,
        "lifecycle": {"preStop": {"sleep": {"seconds": 150}}}}]}));
    let mut w = h.worker(&p);
    let (deletions, grace_rx) = tokio::sync::watch::channel(Some(200));
    w.deletion_grace = grace_rx;
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.take_calls();
    w.apply(super::WorkerMsg::Deleted);
    let t0 = tokio::time::Instant::now();
    // A second delete with gracePeriodSeconds 2 arrives 5 s into the 150 s preStop sleep.
    let (synced, ()) = tokio::join!(w.sync(), async {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        deletions.send_replace(Some(2));
    });
    synced.expect("sync");
    let took = t0.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "terminated after {took:?}"
    );
    let calls = h.rt.take_calls();
    assert!(
        calls.contains(&format!("stop {} 2s", app.info.id)),
        "{calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_with_nothing_left_here_keeps_its_last_status() {
    // The pod was torn down and reported deleted; a finalizer keeps its object, which comes
    // back with a new worker: that worker must not report containers it never saw as
    // waiting. A terminal status stands; one that is not is made terminal (kubelet:
    // `TerminatePod`), its terminated containers as they were.
    let h = harness();
    h.rt.add_image(IMAGE);
    let mut p = pod(json!({"containers": [{"name": "app", "image": IMAGE}]}));
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        verge_edge_store::clock::now(),
    ));
    p.metadata.deletion_grace_period_seconds = Some(0);
    let killed = json!({"name": "app", "image": IMAGE, "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 143, "reason": "Error"}}});
    let with_phase = |phase: &str| {
        serde_json::from_value(json!({"phase": phase, "containerStatuses": [killed]}))
            .expect("status")
    };
    p.status = Some(with_phase("Failed"));
    let mut w = h.worker(&p);
    w.sync().await.expect("sync");
    assert!(w.last_status.is_none(), "{:?}", w.last_status);
    p.status = Some(with_phase("Running"));
    let mut w = h.worker(&p);
    w.sync().await.expect("sync");
    let s = w.last_status.clone().expect("made terminal");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let app = status(&w, "app").state.and_then(|s| s.terminated);
    assert_eq!(app.map(|t| t.exit_code), Some(143), "as it was");
    assert!(h.rt.instances("app").is_empty(), "nothing started");
}
