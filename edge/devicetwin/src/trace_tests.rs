//! Twin reports and desired changes are traced (spans recorded in memory).

use std::collections::BTreeMap;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanId, TraceContextExt as _};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use verge_core::TraceContext;
use verge_telemetry::propagation::{inject, trace_id};
use verge_telemetry::testing::SpanCapture;

use super::bus::TwinBus;
use super::devices::DeviceId;
use super::tests::{fixture, pending, twin};
use super::trace::{DesiredTraces, desired_span, dmi_span};
use verge_eventbus::payload::{MsgTwin, TwinValue};
use verge_eventbus::{DeviceRef, TwinService as _, TwinUpdate};

/// Waits up to 5 s for a span `name` to have ended: the writer ends its report spans after
/// the commit, which may be after the caller's `report` returned.
async fn wait_ended(capture: &SpanCapture, name: &str) {
    for _ in 0..250 {
        if capture.names().iter().any(|n| n == name) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn a_mapper_report_starts_a_trace_its_status_report_carries() {
    let capture = SpanCapture::start("edgecore");
    let f = fixture().await;
    let stamped = || {
        let mut t = twin("temperature", "20");
        if let Some(r) = t.reported.as_mut() {
            r.metadata.insert("timestamp".into(), "1".into());
        }
        vec![t]
    };
    f.twins
        .report("ns", "thermo", stamped())
        .await
        .expect("report");

    let span = {
        wait_ended(&capture, "devicetwin.report").await;
        capture.span("devicetwin.report")
    };
    assert_eq!(span.parent_span_id, SpanId::INVALID, "a root");
    assert_eq!(
        attribute(&span.attributes, "verge.device.name").as_deref(),
        Some("thermo")
    );
    assert_eq!(
        attribute(&span.attributes, "k8s.namespace.name").as_deref(),
        Some("ns")
    );
    assert_eq!(
        attribute(&span.attributes, "verge.twin.properties").as_deref(),
        Some("1")
    );
    let (message, _) = pending(&f.store).expect("status report in the outbox");
    assert_eq!(
        trace_id(&message.trace),
        Some(span.span_context.trace_id().to_string()),
        "the report continues the span's trace"
    );
    assert!(
        message
            .trace
            .traceparent
            .contains(&span.span_context.span_id().to_string()),
        "{:?} names the span",
        message.trace
    );

    // The same value and timestamp again changes nothing the cloud sees: no report, no
    // trace (a mapper stamping each read makes a report, and a trace, per read).
    f.twins
        .report("ns", "thermo", stamped())
        .await
        .expect("report");
    assert_eq!(
        {
            wait_ended(&capture, "devicetwin.report").await;
            capture.span("devicetwin.report")
        }
        .span_context,
        span.span_context
    );
}

#[tokio::test]
async fn a_report_of_a_local_property_starts_no_trace() {
    let capture = SpanCapture::start("edgecore");
    let f = fixture().await;
    f.twins
        .report("ns", "thermo", vec![twin("local", "1")])
        .await
        .expect("report");
    assert!(capture.names().is_empty(), "{:?}", capture.names());
}

#[tokio::test]
async fn an_mqtt_twin_update_is_the_root_of_its_report() {
    let capture = SpanCapture::start("edgecore");
    let f = fixture().await;
    let bus = TwinBus::new(f.twins.clone());
    let value = MsgTwin {
        actual: Some(TwinValue {
            value: Some("22".into()),
            metadata: None,
        }),
        ..MsgTwin::default()
    };
    let update = TwinUpdate {
        event_id: "e-1".into(),
        twins: BTreeMap::from([("temperature".to_owned(), Some(value))]),
    };
    bus.update(DeviceRef::new("ns", "thermo"), update)
        .await
        .expect("update");

    let root = {
        wait_ended(&capture, "devicetwin.mqtt_update").await;
        capture.span("devicetwin.mqtt_update")
    };
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    let report = {
        wait_ended(&capture, "devicetwin.report").await;
        capture.span("devicetwin.report")
    };
    assert_eq!(report.parent_span_id, root.span_context.span_id());
    assert_eq!(report.span_context.trace_id(), root.span_context.trace_id());
    let (message, _) = pending(&f.store).expect("status report");
    assert_eq!(
        trace_id(&message.trace),
        Some(root.span_context.trace_id().to_string())
    );
}

#[tokio::test]
async fn a_desired_change_is_continued_by_the_mapper_call() {
    let capture = SpanCapture::start("edgecore");
    let commit = verge_telemetry::span!("metamanager.apply");
    let change = inject(&commit);
    let commit_id = commit.context().span().span_context().span_id();
    drop(commit);

    let id = DeviceId::new("ns", "thermo");
    let traces = DesiredTraces::default();
    let desired = desired_span("ns/device/thermo", &change);
    desired.in_scope(|| traces.record_current(&id));
    drop(desired);
    let call = dmi_span(true, &id, &traces.get(&id));
    call.in_scope(|| {});
    drop(call);
    traces.done(&id);

    let desired = {
        wait_ended(&capture, "devicetwin.desired").await;
        capture.span("devicetwin.desired")
    };
    assert_eq!(desired.parent_span_id, commit_id);
    let call = {
        wait_ended(&capture, "dmi.update_device").await;
        capture.span("dmi.update_device")
    };
    assert_eq!(call.parent_span_id, desired.span_context.span_id());
    assert!(traces.get(&id).is_empty(), "done ends the link");

    // Untraced changes and calls start nothing.
    assert!(desired_span("ns/device/thermo", &TraceContext::default()).is_none());
    assert!(dmi_span(false, &id, &TraceContext::default()).is_none());
}
