//! The Prometheus series every controller shares (docs/observability.md "Metrics"),
//! registered with the Kubernetes API request series of `verge_runtime` by [`register`]
//! into the registry that [`crate::binary::main`] serves as `/metrics` on the probe
//! endpoint. One process-wide instance ([`global`]); tests make their own.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_controller_messages_total` | counter | `direction` (`sent`, `received`), `group`, `operation` |
//! | `verge_controller_watch_events_total` | counter | `resource`, `event` (`apply`, `delete`, `relisted`, `error`) |
//! | `verge_controller_object_watches` | gauge | `resource`: single-object watches open now (edgecontroller's referenced ConfigMaps and Secrets, each as a node using it) |
//! | `verge_controller_resync_duration_seconds` | histogram | — |
//! | `verge_controller_resync_objects_total` | counter | `operation` (`update`, `delete`) |
//! | `verge_kube_api_request_duration_seconds`, `verge_kube_api_requests_total` | | see `verge_runtime::metrics::kube_api` |
//!
//! A resync lasts from the node's session event (connected, with its inventory) until the
//! edge answered the `resync` marker that follows the objects sent for it.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use verge_core::Envelope;
use verge_runtime::metrics::MessageLabels;

/// Labels of `verge_controller_watch_events_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watched resource (plural).
    pub resource: String,
    /// `apply`, `delete`, `relisted` or `error`.
    pub event: &'static str,
}

/// Labels of `verge_controller_object_watches`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The watched resource (plural).
    pub resource: &'static str,
}

/// Labels of `verge_controller_resync_objects_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OperationLabels {
    /// `update` or `delete`.
    pub operation: &'static str,
}

/// A controller's series (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    messages: Family<MessageLabels, Counter>,
    watch_events: Family<WatchLabels, Counter>,
    object_watches: Family<ResourceLabels, Gauge>,
    resync_duration: Histogram,
    resync_objects: Family<OperationLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            messages: Family::default(),
            watch_events: Family::default(),
            object_watches: Family::default(),
            resync_duration: Histogram::new(verge_runtime::metrics::latency_buckets()),
            resync_objects: Family::default(),
        }
    }
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's series.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

/// Registers the process's series ([`global`]) and the Kubernetes API request series of
/// its client into `registry`.
pub fn register(registry: &mut Registry) {
    global().register(registry);
    verge_runtime::metrics::kube_api::global().register(registry);
}

impl Metrics {
    /// Registers these series into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "verge_controller_messages",
            "Messages exchanged with the edges through cloudhub, by direction (sent, received), group and operation.",
            self.messages.clone(),
        );
        registry.register(
            "verge_controller_watch_events",
            "Kubernetes watch events of the controller's caches, by resource and event (apply, delete, relisted, error).",
            self.watch_events.clone(),
        );
        registry.register(
            "verge_controller_object_watches",
            "Single-object watches open now, by resource (edgecontroller: each referenced ConfigMap and Secret, watched as a node using it).",
            self.object_watches.clone(),
        );
        registry.register(
            "verge_controller_resync_duration_seconds",
            "Time from a node's session event until the edge answered the resync marker.",
            self.resync_duration.clone(),
        );
        registry.register(
            "verge_controller_resync_objects",
            "Objects sent to bring a (re)connected node in line, by operation (update, delete).",
            self.resync_objects.clone(),
        );
    }

    /// Counts `envelope` sent to (`sent: true`) or received from an edge.
    pub fn message(&self, sent: bool, envelope: &Envelope) {
        self.messages
            .get_or_create(&MessageLabels {
                direction: if sent { "sent" } else { "received" },
                group: envelope.group.metric_label(),
                operation: envelope.operation().as_str(),
            })
            .inc();
    }

    /// Counts a watch `event` of `resource`.
    pub fn watch_event(&self, resource: &str, event: &'static str) {
        self.watch_events
            .get_or_create(&WatchLabels {
                resource: resource.to_owned(),
                event,
            })
            .inc();
    }

    /// Sets the number of single-object watches of `resource` open now.
    pub fn object_watches(&self, resource: &'static str, open: usize) {
        self.object_watches
            .get_or_create(&ResourceLabels { resource })
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Records a resync that took `elapsed`.
    pub fn resync_done(&self, elapsed: Duration) {
        self.resync_duration.observe(elapsed.as_secs_f64());
    }

    /// Counts the `updates` and `deletes` a resync marker summarizes.
    pub fn resync_objects(&self, updates: usize, deletes: usize) {
        for (operation, count) in [("update", updates), ("delete", deletes)] {
            self.resync_objects
                .get_or_create(&OperationLabels { operation })
                .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use verge_core::Module;

    use super::*;

    #[test]
    fn series_encode_with_conventional_names() {
        let metrics = Metrics::default();
        let message = Envelope::keepalive(Module::EdgeHub, None);
        metrics.message(false, &message);
        metrics.watch_event("pods", "apply");
        metrics.resync_done(Duration::from_millis(40));
        metrics.resync_objects(3, 1);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = verge_runtime::metrics::encode(&registry).expect("encodes");
        for line in [
            "verge_controller_messages_total{direction=\"received\",group=\"hub\",operation=\"keepalive\"} 1\n",
            "verge_controller_watch_events_total{resource=\"pods\",event=\"apply\"} 1\n",
            "verge_controller_resync_duration_seconds_count 1\n",
            "verge_controller_resync_duration_seconds_bucket{le=\"0.08\"} 1\n",
            "verge_controller_resync_objects_total{operation=\"update\"} 3\n",
            "verge_controller_resync_objects_total{operation=\"delete\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
