//! The `cloudhub.deliver` span of a traced object message (module docs of [`super`]).

use verge_core::Envelope;

/// The `cloudhub.deliver` span of object `message` (disabled when it is not traced); the
/// message leaves with its context.
pub(super) fn deliver_span(message: &mut Envelope) -> tracing::Span {
    let span = verge_telemetry::propagation::continued(&message.trace, || {
        verge_telemetry::span!(
            "cloudhub.deliver",
            verge.message.id = %message.id,
            verge.resource = %message.path(),
            verge.operation = %message.operation(),
            verge.attempts = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    });
    let traced = verge_telemetry::propagation::inject(&span);
    if !traced.is_empty() {
        message.trace = traced;
    }
    span
}

/// A `cloudhub.deliver` span that ends when dropped: tracing-opentelemetry ends a span at
/// its last exit, not at its close, so it is entered once more on drop and lasts until the
/// message leaves the queue for good (answered, replaced, given up, or the session ended).
#[derive(Debug)]
pub(super) struct DeliverSpan(pub(super) tracing::Span);

impl std::ops::Deref for DeliverSpan {
    type Target = tracing::Span;

    fn deref(&self) -> &tracing::Span {
        &self.0
    }
}

impl Drop for DeliverSpan {
    fn drop(&mut self) {
        self.0.in_scope(|| {});
    }
}
