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
