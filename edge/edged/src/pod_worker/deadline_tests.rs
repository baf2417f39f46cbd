//! `activeDeadlineSeconds` against the fake runtime: a deadline set on a running pod that is
//! already past it fails the pod with `DeadlineExceeded` and stops its container.

use serde_json::json;

use super::deadline;
use super::observe::RunState;
use super::tests::{IMAGE, harness, pod, settle, started_a_minute_ago};

#[tokio::test(start_paused = true)]
async fn a_deadline_set_on_a_running_pod_past_it_fails_the_pod() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let mut p = pod(json!({"restartPolicy": "Always",
        "containers": [{"name": "app", "image": IMAGE}]}));
    started_a_minute_ago(&mut p);
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert_eq!(
        w.last_status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );

    p.spec.as_mut().expect("spec").active_deadline_seconds = Some(5);
    w.pod = std::sync::Arc::new(p);
    settle(&mut w).await;
    let s = w.last_status.clone().expect("status");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some(deadline::REASON));
    assert_eq!(s.message.as_deref(), Some(deadline::MESSAGE));
    let app = h.rt.instances("app");
    assert!(
        app.iter().all(|c| c.info.state != RunState::Running),
        "the container is stopped"
    );
    assert!(h.events().iter().any(|(r, _)| r == deadline::REASON));
}
