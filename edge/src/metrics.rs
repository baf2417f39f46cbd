//! edgecore's Prometheus series (docs/observability.md "Metrics"), served as `/metrics` on
//! `metricsAddr` (loopback by default). Each edge crate counts its own series into a
//! process-wide instance: edgehub ([`crate::edgehub::metrics`], the message and session
//! series), edged ([`crate::edged::metrics`], pod start stages) and devicetwin
//! ([`crate::devicetwin::metrics`], twin reports); the outbox gauges are read from the store
//! at scrape time ([`OutboxCollector`]). [`register`] puts them all on one registry.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_edgecore_messages_total` | counter | `direction` (`upstream`, `downstream`), `group`, `operation` |
//! | `verge_edgecore_connected` | gauge | — (1 while a cloudhub session is up) |
//! | `verge_edgecore_reconnects_total` | counter | — (sessions established after the first) |
//! | `verge_edgecore_outbox_entries` | gauge | — |
//! | `verge_edgecore_outbox_oldest_age_seconds` | gauge | — |
//! | `verge_edgecore_pod_start_duration_seconds` | histogram | `stage` (`image`, `sandbox`, `container`, `total`) (edged's) |
//! | `verge_edgecore_twin_reports_total` | counter | `result` (`ok`, `error`) (devicetwin's) |

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tracing::warn;

use verge_edge_store::MetaStore;

/// The outbox gauges, read from the store at every scrape: `verge_edgecore_outbox_entries`
/// (reports waiting for the cloud's ack) and `verge_edgecore_outbox_oldest_age_seconds`
/// (how long ago the oldest waiting report was made, by its message timestamp; 0 when
/// empty; a newer report of the same key replaces the older, so a re-reported node status
/// stays young). Reading is one small redb read transaction.
#[derive(Debug)]
pub struct OutboxCollector {
    store: MetaStore,
}

impl OutboxCollector {
    /// The collector of `store`'s outbox.
    pub fn new(store: MetaStore) -> Self {
        Self { store }
    }

    /// Entries and the age of the oldest, in seconds.
    fn read(&self) -> crate::Result<(u64, f64)> {
        let entries = self.store.outbox_len()?;
        let oldest = match self.store.outbox_after(None, 1)?.first() {
            Some(entry) => Some(crate::edgehub::outbox::message(entry)?.timestamp_ms),
            None => None,
        };
        let age = oldest.map_or(0.0, |timestamp_ms| {
            let ms = verge_core::now_ms().saturating_sub(timestamp_ms).max(0);
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)).as_secs_f64()
        });
        Ok((entries, age))
    }
}

impl Collector for OutboxCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (entries, age) = match self.read() {
            Ok(read) => read,
            Err(error) => {
                warn!(error = %verge_runtime::ErrorChain(&error), "cannot read the outbox for /metrics");
                return Ok(());
            }
        };
        let depth = ConstGauge::new(i64::try_from(entries).unwrap_or(i64::MAX));
        depth.encode(encoder.encode_descriptor(
            "verge_edgecore_outbox_entries",
            "Upstream reports in the outbox waiting for the cloud's ack.",
            None,
            depth.metric_type(),
        )?)?;
        let age = ConstGauge::new(age);
        age.encode(encoder.encode_descriptor(
            "verge_edgecore_outbox_oldest_age_seconds",
            "Age of the oldest report waiting in the outbox (0 when empty).",
            None,
            age.metric_type(),
        )?)
    }
}

/// Registers edgecore's series: edgehub's ([`crate::edgehub::metrics`]), devicetwin's
/// ([`crate::devicetwin::metrics`]), edged's ([`crate::edged::metrics`]) and the outbox
/// gauges of `store`, into `registry`.
pub fn register(registry: &mut Registry, store: &MetaStore) {
    crate::edgehub::metrics::global().register(registry);
    crate::devicetwin::metrics::global().register(registry);
    crate::edged::metrics::global().register(registry);
    registry.register_collector(Box::new(OutboxCollector::new(store.clone())));
}

#[cfg(test)]
mod tests {
    use verge_core::{Envelope, Group, Module, Operation};

    use super::*;

    fn text(registry: &Registry) -> String {
        verge_runtime::metrics::encode(registry).expect("encodes")
    }

    #[test]
    fn series_encode_with_conventional_names() {
        let hub = crate::edgehub::metrics::HubMetrics::default();
        hub.message(true, &Envelope::keepalive(Module::EdgeHub, None));
        hub.session_established(1);
        hub.session_ended();
        hub.session_established(2);
        let metrics = crate::edged::metrics::Metrics::default();
        metrics.pod_start(
            crate::edged::metrics::Stage::Image,
            Duration::from_millis(30),
        );
        metrics.pod_start(crate::edged::metrics::Stage::Total, Duration::from_secs(2));
        let twins = crate::devicetwin::metrics::TwinMetrics::default();
        twins.twin_report(true);
        let mut registry = Registry::default();
        hub.register(&mut registry);
        twins.register(&mut registry);
        metrics.register(&mut registry);
        let text = text(&registry);
        for line in [
            "verge_edgecore_messages_total{direction=\"upstream\",group=\"hub\",operation=\"keepalive\"} 1\n",
            "verge_edgecore_connected 1\n",
            "verge_edgecore_reconnects_total 1\n",
            "verge_edgecore_pod_start_duration_seconds_bucket{le=\"0.04\",stage=\"image\"} 1\n",
            "verge_edgecore_pod_start_duration_seconds_count{stage=\"total\"} 1\n",
            "verge_edgecore_twin_reports_total{result=\"ok\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }

    #[test]
    fn outbox_gauges_are_read_at_scrape_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("store");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(OutboxCollector::new(store.clone())));
        let before = text(&registry);
        assert!(
            before.contains("verge_edgecore_outbox_entries 0\n"),
            "{before}"
        );
        assert!(
            before.contains("verge_edgecore_outbox_oldest_age_seconds 0.0\n"),
            "{before}"
        );
        let message = verge_proto::Message::build(
            "r1",
            "edged",
            Group::Resource,
            Operation::Insert,
            "ns/event/e1",
            b"{}".to_vec(),
        )
        .with_object("u", "");
        let mut report = Envelope::try_from(message).expect("valid");
        report.timestamp_ms -= 5_000;
        store
            .outbox_put(
                &report,
                &verge_proto::envelope::encode(&report),
                verge_edge_store::OutboxLimits::entries(10),
            )
            .expect("put");
        let after = text(&registry);
        assert!(
            after.contains("verge_edgecore_outbox_entries 1\n"),
            "{after}"
        );
        let age = after
            .lines()
            .find_map(|l| l.strip_prefix("verge_edgecore_outbox_oldest_age_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("age");
        assert!((5.0..60.0).contains(&age), "{after}");
    }
}
