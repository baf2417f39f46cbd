//! W3C trace context between a [`TraceContext`] (a Message envelope's `trace_context`) and a
//! `tracing` span, with OpenTelemetry's `TraceContextPropagator` (`traceparent`,
//! `tracestate`).
//!
//! A sender calls [`inject_current`] (or [`inject`]) and puts the result into the envelope
//! it sends; a receiver creates its span and calls [`set_parent`] with the envelope's
//! context before entering it, so the span continues the sender's trace. Both are no-ops
//! (empty context, parent unchanged) when no OpenTelemetry layer is installed.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use verge_core::TraceContext;

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The W3C context of the current span ([`tracing::Span::current`]); see [`inject`].
pub fn inject_current() -> TraceContext {
    inject(&tracing::Span::current())
}

/// The W3C context of `span`, to carry in a message so its receiver continues the trace.
/// Empty when `span` is not recorded by an OpenTelemetry layer (export off, or the span is
/// disabled by the filter) or is not sampled-in-context (no valid span id).
pub fn inject(span: &tracing::Span) -> TraceContext {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return TraceContext::default();
    }
    let mut carrier = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    TraceContext {
        traceparent: carrier.remove(TRACEPARENT).unwrap_or_default(),
        tracestate: carrier.remove(TRACESTATE).unwrap_or_default(),
    }
}

/// Makes the trace of `trace` (a received message's context) the parent of `span`, which
/// must be new (not yet entered, no child created, not injected). Does nothing for an empty
/// or malformed context (the span stays a root or keeps its local parent) or when no
/// OpenTelemetry layer is installed.
pub fn set_parent(span: &tracing::Span, trace: &TraceContext) {
    if trace.traceparent.is_empty() || span.is_disabled() {
        return;
    }
    let context = extract(trace);
    if !context.span().span_context().is_valid() {
        tracing::debug!(traceparent = %trace.traceparent, "ignoring a malformed trace context");
        return;
    }
    // LayerNotFound (export off) and AlreadyStarted leave the span as it is: tracing
    // continues, only this link is missing.
    let _ = span.set_parent(context);
}

/// A span continuing the trace of `trace` (a received message's context): `make()`'s span
/// with that parent, or a disabled span without calling `make` when `trace` is empty, so
/// untraced messages (tracing off where they were made) start no
/// trace of their own. A context whose sampled flag is off still yields a span, which the
/// parent-based sampler then drops.
pub fn continued(trace: &TraceContext, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if trace.traceparent.is_empty() {
        return tracing::Span::none();
    }
    let span = make();
    set_parent(&span, trace);
    span
}

/// A span for a step inside the current trace: `make()`'s span when the current span is
/// exported (a valid OpenTelemetry span context), else a disabled span without calling
/// `make`, so a step of untraced work (a periodic resync, a report without context) starts
/// no trace of its own.
pub fn in_trace(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    let current = tracing::Span::current();
    if current.is_none() || !current.context().span().span_context().is_valid() {
        return tracing::Span::none();
    }
    make()
}

/// The OpenTelemetry context `trace` describes (a remote span context), empty when `trace`
/// is empty or malformed.
pub fn extract(trace: &TraceContext) -> opentelemetry::Context {
    let mut carrier = HashMap::with_capacity(2);
    if !trace.traceparent.is_empty() {
        carrier.insert(TRACEPARENT.to_owned(), trace.traceparent.clone());
    }
    if !trace.tracestate.is_empty() {
        carrier.insert(TRACESTATE.to_owned(), trace.tracestate.clone());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The trace id (32 lowercase hex digits) of `trace`, if it holds a valid `traceparent`;
/// what Jaeger's `/api/traces/<id>` takes.
pub fn trace_id(trace: &TraceContext) -> Option<String> {
    let context = extract(trace);
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
