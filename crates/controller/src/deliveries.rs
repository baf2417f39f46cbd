//! The traces of downstream deliveries: which trace a downstream message continues.
//!
//! A change seen by a watch (the downstream task's `controller.watch_event` span) starts a
//! `controller.deliver` span per object message it causes; every send of that object to the
//! node is a `controller.send` child of it, whose W3C context the message carries. The
//! delivery stays open until the edge answers the newest send, so a message sent again after
//! a delivery error, a partition or a reconnect (resync by inventory) still belongs to the
//! trace of the change that caused it, and the wait is the delivery span's duration. A newer
//! change of the same object while its delivery is open joins that delivery (event "newer
//! change joined"): an update right after a pod's creation (edgecontroller's optional
//! toleration patch, say) stays in the pod creation's trace.

use std::collections::HashMap;

use verge_core::{Envelope, MessageId, Operation, ResourceKey};

/// Most open deliveries per node; beyond it new ones are not traced.
const MAX_PER_NODE: usize = 4096;

/// An open delivery of one object to one node.
#[derive(Debug)]
struct Delivery {
    /// `controller.deliver`; ends when dropped.
    span: tracing::Span,
    /// The newest message sent for it.
    message_id: MessageId,
    /// Sends so far.
    sends: u32,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // tracing-opentelemetry ends a span at its last exit, not at its close: enter it
        // once more so the span lasts until the delivery ends.
        self.span.in_scope(|| {});
    }
}

/// The open deliveries of a downstream task, per node and object.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    nodes: HashMap<String, HashMap<ResourceKey, Delivery>>,
}

impl Deliveries {
    /// The `controller.send` span of `message` to `node` (disabled when not traced), its
    /// context put into the message. Call it inside the span of the cause (a watch event),
    /// if any.
    pub(crate) fn send_span(&mut self, node: &str, message: &mut Envelope) -> tracing::Span {
        let Some(key) = message.delivery_key().cloned() else {
            return tracing::Span::none();
        };
        if message.operation() == Operation::Resync {
            return tracing::Span::none();
        }
        let cause = verge_telemetry::propagation::inject_current();
        let pending = self.nodes.entry(node.to_owned()).or_default();
        if !cause.is_empty()
            && let Some(open) = pending.get(&key)
        {
            open.span.in_scope(|| {
                tracing::info!(
                    target: verge_telemetry::TARGET,
                    traceparent = %cause.traceparent,
                    "newer change joined"
                );
            });
        }
        if !pending.contains_key(&key) {
            if cause.is_empty() || pending.len() >= MAX_PER_NODE {
                return tracing::Span::none();
            }
            let span = verge_telemetry::span!(
                "controller.deliver",
                verge.node = %node,
                verge.resource = %message.path(),
                verge.operation = %message.operation(),
                verge.sends = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            );
            let delivery = Delivery {
                span,
                message_id: message.id.clone(),
                sends: 0,
            };
            pending.insert(key.clone(), delivery);
        }
        let Some(delivery) = pending.get_mut(&key) else {
            return tracing::Span::none();
        };
        delivery.sends += 1;
        delivery.message_id = message.id.clone();
        let send = verge_telemetry::span!(
            parent: &delivery.span,
            "controller.send",
            verge.node = %node,
            verge.message.id = %message.id,
            verge.resource = %message.path(),
            verge.operation = %message.operation(),
            verge.attempt = delivery.sends,
        );
        message.trace = verge_telemetry::propagation::inject(&send);
        send
    }

    /// `node` answered message `parent_id`: ends the delivery whose newest send it is (as
    /// failed when the edge answered `error`).
    pub(crate) fn answered(&mut self, node: &str, parent_id: &str, refused: bool) {
        let Some(pending) = self.nodes.get_mut(node) else {
            return;
        };
        let Some(key) = pending
            .iter()
            .find(|(_, d)| d.message_id.as_str() == parent_id)
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        if let Some(done) = pending.remove(&key) {
            done.span.record("verge.sends", done.sends);
            if refused {
                done.span.record("otel.status_code", "ERROR");
            }
        }
    }

    /// Cloudhub could not deliver message `message_id` to `node`: an event of its delivery,
    /// which stays open for the next send.
    pub(crate) fn failed(&mut self, node: &str, message_id: &str) {
        let delivery = self
            .nodes
            .get(node)
            .and_then(|p| p.values().find(|d| d.message_id.as_str() == message_id));
        if let Some(delivery) = delivery {
            delivery.span.in_scope(|| {
                tracing::info!(target: verge_telemetry::TARGET, "not delivered; sent again later");
            });
        }
    }

    /// Forgets the deliveries of nodes for which `keep` is false (nodes that left).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.nodes.retain(|node, _| keep(node));
    }
}

#[cfg(test)]
mod tests {
    use verge_core::{Group, Kind, Module, ObjectVersion, TraceContext, Write};
    use verge_telemetry::propagation::trace_id;
    use verge_telemetry::testing::SpanCapture;

    use super::*;

    fn update(name: &str) -> Envelope {
        let key: ResourceKey = format!("default/pod/{name}").parse().expect("key");
        let kind = Kind::Upsert {
            write: Write::Update,
            key,
            version: ObjectVersion::default(),
        };
        Envelope::new(Module::CloudHub, Group::Resource, kind, Vec::new())
    }

    fn span_id(trace: &TraceContext) -> String {
        trace
            .traceparent
            .split('-')
            .nth(2)
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn a_resend_after_a_failure_stays_in_the_trace_of_the_change() {
        let capture = SpanCapture::start("edgecontroller");
        let mut deliveries = Deliveries::default();
        let watch = verge_telemetry::span!("controller.watch_event");
        let mut first = update("web");
        let change = verge_telemetry::propagation::inject(&watch);
        watch.in_scope(|| drop(deliveries.send_span("edge-1", &mut first)));
        drop(watch);
        assert_eq!(trace_id(&first.trace), trace_id(&change));

        deliveries.failed("edge-1", first.id.as_str());
        // The resend (a retry or a resync after reconnecting) has no cause of its own.
        let mut again = update("web");
        drop(deliveries.send_span("edge-1", &mut again));
        assert_eq!(trace_id(&again.trace), trace_id(&change));
        let mut untraced = update("other");
        drop(deliveries.send_span("edge-1", &mut untraced));
        assert!(untraced.trace.is_empty(), "no delivery without a cause");

        deliveries.answered("edge-1", first.id.as_str(), false);
        assert!(
            capture
                .spans()
                .iter()
                .all(|s| s.name != "controller.deliver"),
            "an answer to an older send leaves the delivery open"
        );
        deliveries.answered("edge-1", again.id.as_str(), false);

        let deliver = capture.span("controller.deliver");
        assert_eq!(deliver.parent_span_id.to_string(), span_id(&change));
        assert!(
            deliver
                .events
                .iter()
                .any(|e| e.name == "not delivered; sent again later")
        );
        let sends: Vec<_> = capture
            .spans()
            .into_iter()
            .filter(|s| s.name == "controller.send")
            .collect();
        assert_eq!(sends.len(), 2);
        for send in &sends {
            assert_eq!(send.parent_span_id, deliver.span_context.span_id());
        }
        assert_eq!(
            span_id(&again.trace),
            sends[1].span_context.span_id().to_string()
        );
    }

    #[test]
    fn a_newer_change_joins_the_open_delivery() {
        let capture = SpanCapture::start("edgecontroller");
        let mut deliveries = Deliveries::default();
        for _ in 0..2 {
            let watch = verge_telemetry::span!("controller.watch_event");
            let mut message = update("web");
            watch.in_scope(|| drop(deliveries.send_span("edge-1", &mut message)));
        }
        assert!(
            capture
                .spans()
                .iter()
                .all(|s| s.name != "controller.deliver"),
            "one delivery, still open"
        );
        deliveries.retain(|_| false);
        let deliver = capture.span("controller.deliver");
        assert!(
            deliver
                .events
                .iter()
                .any(|e| e.name == "newer change joined")
        );
        let spans = capture.spans();
        // The first change's span ends last: its child, the delivery, kept it open.
        let first_watch = spans
            .iter()
            .filter(|s| s.name == "controller.watch_event")
            .min_by_key(|s| s.start_time)
            .expect("watch");
        assert_eq!(deliver.parent_span_id, first_watch.span_context.span_id());
        let sends: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "controller.send")
            .collect();
        assert_eq!(sends.len(), 2);
        assert!(
            sends
                .iter()
                .all(|s| s.parent_span_id == deliver.span_context.span_id())
        );
    }
}
