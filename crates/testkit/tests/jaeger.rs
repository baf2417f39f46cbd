//! The kit's Jaeger: built from its Go module, started (or reused) in the background, one
//! span exported over OTLP/gRPC by the OpenTelemetry SDK's own exporter, then found through
//! the query client with its parent link, service, timing and tags. Independent of the
//! control plane and Docker.

use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use verge_testkit::jaeger::{self, TraceQuery};
use verge_testkit::wait::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_sent_over_otlp_is_found_through_the_query_api() -> anyhow::Result<()> {
    let jaeger = jaeger::shared().await?;
    // A service name of its own per run, so traces of earlier runs do not match.
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_nanos();
    let service = format!("verge-testkit-smoke-{nanos}");
    let pod = format!("smoke-pod-{nanos}");

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(jaeger.otlp_grpc_endpoint())
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service.clone())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("verge-testkit");
    let (trace_id, parent_id, child_id) = tracer.in_span("smoke.parent", |cx| {
        let parent = cx.span().span_context().clone();
        let child = tracer
            .span_builder("smoke.child")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("k8s.pod.name", pod.clone()),
                KeyValue::new("attempt", 2_i64),
            ])
            .start_with_context(&tracer, &cx);
        let child_id = child.span_context().span_id();
        drop(child);
        (parent.trace_id(), parent.span_id(), child_id)
    });
    tokio::task::spawn_blocking(move || provider.shutdown()).await??;

    let trace_hex = trace_id.to_string();
    let trace = wait_for("the span in Jaeger", Duration::from_secs(20), || {
        let jaeger = jaeger.clone();
        let trace_hex = trace_hex.clone();
        async move {
            Ok(jaeger
                .trace(&trace_hex)
                .await?
                .filter(|t| t.spans.len() == 2))
        }
    })
    .await?;
    assert_eq!(trace.trace_id, trace_hex);
    assert_eq!(trace.services(), [service.as_str()]);
    let parent = trace
        .spans_named("smoke.parent")
        .next()
        .expect("parent span");
    let child = trace.spans_named("smoke.child").next().expect("child span");
    assert_eq!(parent.span_id, parent_id.to_string());
    assert_eq!(parent.parent_span_id, None);
    assert_eq!(child.span_id, child_id.to_string());
    assert_eq!(
        child.parent_span_id.as_deref(),
        Some(parent.span_id.as_str())
    );
    assert_eq!(child.tag_str("k8s.pod.name"), Some(pod.as_str()));
    assert_eq!(child.tags.get("attempt"), Some(&serde_json::json!(2)));
    assert_eq!(child.tag_str("span.kind"), Some("client"));
    assert!(child.start_time_us >= parent.start_time_us);
    assert!(parent.duration_us >= child.duration_us);

    // The search the quickstart uses: by service and the pod-name tag.
    let found = jaeger
        .find_traces(&TraceQuery::service(&service).tag("k8s.pod.name", &pod))
        .await?;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].trace_id, trace.trace_id);
    assert!(jaeger.services().await?.contains(&service));
    assert!(
        jaeger
            .traces(&service, Duration::from_secs(600))
            .await?
            .iter()
            .any(|t| t.trace_id == trace.trace_id)
    );
    // Reuse: a second `shared` returns the same running process.
    assert_eq!(jaeger::shared().await?.pid(), jaeger.pid());
    Ok(())
}
