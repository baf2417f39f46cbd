//! `init` installs the process's global subscriber, so it is tested in a process of its own
//! (the unit tests' `SpanCapture` installs the test subscriber globally).

use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use verge_core::TraceContext;
use verge_telemetry::propagation::{extract, inject_current};
use verge_telemetry::{LogFormat, TelemetryError, TracingConfig, init};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn off_installs_no_opentelemetry_layer() {
    let guard = init("test", LogFormat::Text, &TracingConfig::default()).expect("init");
    // With export off the span exists only for logs.
    assert!(!guard.is_exporting());
    let span = verge_telemetry::span!("untraced");
    assert!(
        span.set_parent(extract(&TraceContext {
            traceparent: PARENT.to_owned(),
            tracestate: String::new(),
        }))
        .is_err(),
        "no OpenTelemetry layer"
    );
    assert!(span.in_scope(inject_current).is_empty());
    guard.shutdown().expect("nothing to flush");
    assert!(matches!(
        init("again", LogFormat::Json, &TracingConfig::default()),
        Err(TelemetryError::AlreadyInstalled(_))
    ));
}
