//! Propagation and set-up tests against OpenTelemetry's in-memory exporter.

use opentelemetry::trace::{SpanKind, TraceContextExt as _};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use verge_core::{Envelope, Group, Kind, Module, ResourceKey, TraceContext};

use crate::TracingConfig;
use crate::propagation::{extract, inject, inject_current, set_parent, trace_id};
use crate::testing::SpanCapture;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn message(trace: TraceContext) -> Envelope {
    let key: ResourceKey = "default/pod/web".parse().expect("key");
    let mut envelope = Envelope::new(
        Module::Edged,
        Group::Resource,
        Kind::Query { key },
        Vec::new(),
    );
    envelope.trace = trace;
    envelope
}

#[test]
fn a_trace_context_survives_encode_and_decode_of_a_message() {
    let capture = SpanCapture::start("test");
    let span = crate::span!("sender");
    let context = inject(&span);
    assert!(context.traceparent.starts_with("00-"), "{context:?}");
    let decoded =
        verge_proto::envelope::decode(&verge_proto::envelope::encode(&message(context.clone())))
            .expect("decodes");
    assert_eq!(decoded.trace, context);
    let sent_from = span.context().span().span_context().clone();
    drop(span);
    assert_eq!(
        trace_id(&decoded.trace),
        Some(sent_from.trace_id().to_string())
    );
    drop(capture);
}

#[test]
fn a_span_started_from_an_extracted_context_is_its_child() {
    let capture = SpanCapture::start("test");
    let sender = crate::span!("sender");
    let carried = inject(&sender);
    let sender_context = sender.context().span().span_context().clone();
    drop(sender);

    let receiver = crate::span!("receiver", verge.node = "edge-1");
    set_parent(&receiver, &carried);
    receiver.in_scope(|| {
        let child = crate::span!("child");
        child.in_scope(|| assert_eq!(inject_current().traceparent.len(), PARENT.len()));
    });
    drop(receiver);

    let received = capture.span("receiver");
    assert_eq!(received.span_context.trace_id(), sender_context.trace_id());
    assert_eq!(received.parent_span_id, sender_context.span_id());
    assert!(received.parent_span_is_remote);
    assert_eq!(received.span_kind, SpanKind::Internal);
    assert!(
        received
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == crate::keys::NODE && kv.value.as_str() == "edge-1"),
        "{:?}",
        received.attributes
    );
    let child = capture.span("child");
    assert_eq!(child.parent_span_id, received.span_context.span_id());
    assert_eq!(child.span_context.trace_id(), sender_context.trace_id());
}

#[test]
fn a_foreign_traceparent_is_continued_and_garbage_is_ignored() {
    let capture = SpanCapture::start("test");
    let span = crate::span!("from_foreign");
    set_parent(
        &span,
        &TraceContext {
            traceparent: PARENT.to_owned(),
            tracestate: "vendor=1".to_owned(),
        },
    );
    let injected = inject(&span);
    assert!(
        injected
            .traceparent
            .contains("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(injected.tracestate, "vendor=1");
    drop(span);
    let bad = crate::span!("from_garbage");
    set_parent(
        &bad,
        &TraceContext {
            traceparent: "not-a-traceparent".to_owned(),
            tracestate: String::new(),
        },
    );
    drop(bad);
    let garbage = capture.span("from_garbage");
    assert_ne!(
        garbage.span_context.trace_id().to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(
        garbage.parent_span_id,
        opentelemetry::trace::SpanId::INVALID
    );
    assert!(!extract(&TraceContext::default()).has_active_span());
    assert_eq!(trace_id(&TraceContext::default()), None);
}

#[test]
fn a_sampling_ratio_of_zero_drops_new_traces_but_follows_a_sampled_parent() {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let config = TracingConfig {
        otlp_endpoint: None,
        sampling_ratio: crate::SamplingRatio::new(0.0).expect("ratio"),
    };
    let provider = crate::init::provider_builder("test", &config)
        .with_simple_exporter(exporter.clone())
        .build();
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let subscriber = tracing_subscriber::registry().with(
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("verge"))
            .with_filter(crate::init::otel_filter()),
    );
    tracing::subscriber::with_default(subscriber, || {
        let root = crate::span!("new_trace");
        let carried = inject(&root);
        assert!(
            carried.traceparent.ends_with("-00"),
            "an unsampled root propagates its decision: {carried:?}"
        );
        drop(root);
        let child = crate::span!("continued");
        set_parent(
            &child,
            &TraceContext {
                traceparent: PARENT.to_owned(),
                tracestate: String::new(),
            },
        );
        drop(child);
    });
    let _ = provider.force_flush();
    let names: Vec<_> = exporter
        .get_finished_spans()
        .expect("spans")
        .into_iter()
        .map(|s| s.name.into_owned())
        .collect();
    assert_eq!(names, vec!["continued".to_owned()]);
}

#[tokio::test]
async fn an_endpoint_builds_an_exporter_and_a_bad_one_is_refused() {
    let provider =
        crate::init::otlp_provider("test", "http://127.0.0.1:9", &TracingConfig::default())
            .expect("a URI builds (the connection is lazy)");
    provider
        .shutdown()
        .expect("nothing batched: shutdown succeeds");
    let error = crate::init::otlp_provider("test", "not a uri", &TracingConfig::default())
        .expect_err("refused");
    assert!(error.to_string().contains("not a uri"), "{error}");
}

#[test]
fn only_pipeline_spans_are_exported_and_log_spans_are_skipped_in_parent_links() {
    let capture = SpanCapture::start("test");
    let outer = crate::span!("outer.step");
    outer.in_scope(|| {
        let log_only = tracing::info_span!("pod", pod = "default/web");
        log_only.in_scope(|| {
            tracing::info!(attempt = 2, "retrying");
            drop(crate::span!("inner.step"));
        });
    });
    drop(outer);
    assert_eq!(capture.names(), vec!["inner.step", "outer.step"]);
    let outer = capture.span("outer.step");
    let inner = capture.span("inner.step");
    assert_eq!(inner.parent_span_id, outer.span_context.span_id());
    assert!(
        outer.events.iter().any(|e| e.name == "retrying"),
        "events become span events of the innermost exported span"
    );
}
