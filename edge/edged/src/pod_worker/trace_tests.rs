//! A pod start is one trace under the change that caused it (spans recorded in memory).

use opentelemetry::trace::{SpanId, TraceContextExt as _};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use verge_telemetry::testing::SpanCapture;

use super::tests::{IMAGE, app_pod, harness, pod_network};

#[tokio::test(start_paused = true)]
async fn a_pod_start_is_one_trace_under_the_change_that_caused_it() {
    let capture = SpanCapture::start("edgecore");
    let h = harness();
    h.rt.add_image(IMAGE);
    let commit = verge_telemetry::span!("metamanager.apply");
    let change = verge_telemetry::propagation::inject(&commit);
    let commit_id = commit.context().span().span_context().span_id();
    let trace_id = commit.context().span().span_context().trace_id();
    drop(commit);

    let mut worker = h.worker(&app_pod("Always"));
    worker.trace.follow(change);
    for _ in 0..5 {
        worker.traced_sync().await;
    }
    let phase = worker.last_status.as_ref().and_then(|s| s.phase.clone());
    assert_eq!(phase.as_deref(), Some("Running"));

    let spans = capture.spans();
    let syncs: Vec<_> = spans.iter().filter(|s| s.name == "edged.sync").collect();
    assert_eq!(
        syncs.len(),
        1,
        "one sync creates the sandbox and starts the containers; none once running: {:?}",
        capture.names()
    );
    for sync in &syncs {
        assert_eq!(
            sync.parent_span_id, commit_id,
            "each sync is a child of the commit"
        );
    }
    for name in [
        "edged.sandbox.create",
        "edged.container.create",
        "edged.container.start",
    ] {
        let span = capture.span(name);
        assert_eq!(span.span_context.trace_id(), trace_id, "{name}");
        assert!(
            syncs
                .iter()
                .any(|s| s.span_context.span_id() == span.parent_span_id),
            "{name} is a child of a sync"
        );
    }
    let images: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "edged.image.ensure")
        .collect();
    assert_eq!(images.len(), 2, "pause and app image");
    assert!(
        images
            .iter()
            .all(|s| s.span_context.trace_id() == trace_id && s.parent_span_id != SpanId::INVALID)
    );
    assert!(
        spans.iter().all(|s| s.span_context.trace_id() == trace_id),
        "nothing outside the trace: {:?}",
        capture.names()
    );
}

/// A pod of one container that arrives before the pod network (the Node has not arrived, or
/// awaits its podCIDR) waits without a sandbox and without an `edged.sandbox.create` span,
/// then runs as its one container once the network is ready.
#[tokio::test(start_paused = true)]
async fn a_pod_that_arrives_before_the_pod_network_records_no_sandbox() {
    let capture = SpanCapture::start("edgecore");
    let h = harness();
    h.rt.add_image(IMAGE);
    h.network
        .send_replace(crate::network::NetworkState::AwaitingPodCidr);
    let commit = verge_telemetry::span!("metamanager.apply");
    let change = verge_telemetry::propagation::inject(&commit);
    drop(commit);
    let mut worker = h.worker(&app_pod("Always"));
    worker.trace.follow(change);
    worker.traced_sync().await;
    assert!(h.rt.containers().is_empty(), "nothing created");
    pod_network(&h).await;
    tokio::time::advance(std::time::Duration::from_secs(3)).await;
    for _ in 0..3 {
        worker.traced_sync().await;
    }
    let phase = worker.last_status.as_ref().and_then(|s| s.phase.clone());
    assert_eq!(phase.as_deref(), Some("Running"));
    assert!(
        h.rt.instances(verge_container_runtime::labels::SANDBOX_NAME)
            .is_empty(),
        "no sandbox"
    );
    let names = capture.names();
    assert!(
        !names.iter().any(|n| n == "edged.sandbox.create"),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "edged.container.start"),
        "{names:?}"
    );
}
