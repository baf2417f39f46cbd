//! [`TraceContext`]: W3C trace context carried with a message.

/// The W3C Trace Context (<https://www.w3.org/TR/trace-context/>) of the span that produced
/// a message, so a trace continues across cloud and edge. Both fields are header values as
/// text, empty when absent (tracing off where the message was made). `verge-telemetry`'s
/// `propagation` fills them from a span and continues them in the receiver's spans; the edge
/// outbox stores them with the message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The `traceparent` value, e.g.
    /// `"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`, or empty.
    pub traceparent: String,
    /// The `tracestate` value, or empty.
    pub tracestate: String,
}

impl TraceContext {
    /// Whether neither value is set (the message is not traced).
    pub fn is_empty(&self) -> bool {
        self.traceparent.is_empty() && self.tracestate.is_empty()
    }
}
