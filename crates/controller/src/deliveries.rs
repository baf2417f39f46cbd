//! The traces of downstream deliveries: which trace a downstream message continues.
//!
//! A change seen by a watch (the downstream task's `controller.watch_event` span) starts a
//! `controller.deliver` span per object message it causes; every send of that object to the
//! node is a `controller.send` child of it, whose W3C context the message carries. The
//! delivery stays open until the edge answers the newest send, so a message sent again after
//! a delivery error, a partition or a reconnect (resync by inventory) still belongs to the
//! trace of the change that caused it, and the wait is the delivery span's duration. A newer
//! change of the same object ends the older delivery (event "superseded").

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
            && let Some(old) = pending.remove(&key)
        {
            old.span.in_scope(|| {
                tracing::info!(target: verge_telemetry::TARGET, "superseded by a newer change");
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
        delivery.span.record("verge.sends", delivery.sends);
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
        if let Some(done) = pending.remove(&key)
            && refused
        {
            done.span.record("otel.status_code", "ERROR");
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
