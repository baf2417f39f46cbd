//! Prometheus metrics of every Verge binary (feature `metrics`), with
//! [prometheus-client](https://docs.rs/prometheus-client): each component defines its series
//! in a `metrics` module of its own and registers them into the one [`Registry`] of its
//! process, which the binary serves as `GET /metrics` in the OpenMetrics text format
//! (`metrics_route`, with feature `health`: on the probe endpoint's port).
//!
//! Names follow the Prometheus conventions: a `verge_<component>_` prefix, base units in the
//! name (`_seconds`, `_bytes`), counters registered without the `_total` suffix that the
//! OpenMetrics encoding appends, and only labels of small, bounded value sets (a node label
//! only where a per-node series is the point).
//!
//! # Layout
//! - this module: the text encoding ([`encode`]), the shared histogram buckets
//!   ([`latency_buckets`]) and the `/metrics` route.
//! - [`kube_api`]: Kubernetes API request latency and results, recorded by a tower layer on
//!   the client `kube_client` builds (feature `kube`).

pub mod kube_api;

pub use prometheus_client;
pub use prometheus_client::registry::Registry;

/// Labels of a component's `verge_<component>_messages_total`: one message on the
/// cloud–edge stream, by direction (each component names its own two, e.g. cloudhub's
/// `upstream`/`downstream`, a controller's `sent`/`received`), the message group (`resource`,
/// `device`, `hub`, ...) and the wire operation (`update`, `delete`, `ack`, ...). Every value
/// comes from a fixed set, so the series stay few.
#[derive(Debug, Clone, PartialEq, Eq, Hash, prometheus_client::encoding::EncodeLabelSet)]
pub struct MessageLabels {
    /// Which way the message went.
    pub direction: &'static str,
    /// The message group.
    pub group: &'static str,
    /// The wire operation.
    pub operation: &'static str,
}

/// The `Content-Type` of [`encode`]'s output (OpenMetrics 1.0 text, which Prometheus
/// negotiates and prefers).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text exposition of everything in `registry`, ending with `# EOF`.
///
/// # Errors
/// A metric failed to encode (the encoder writes into a `String`, so only a label or
/// value that cannot be formatted).
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

/// Histogram buckets, in seconds, for request and start-up latencies: 5 ms doubling to
/// about 82 s (15 buckets), wide enough for a fast API call and a slow image pull alike.
pub fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.005, 2.0, 15)
}

/// The `GET /metrics` route serving `registry` (for
/// [`HealthEndpoint::route`](crate::health::HealthEndpoint::route)): 200 with
/// [`CONTENT_TYPE`], or 500 when encoding failed.
#[cfg(feature = "health")]
pub fn metrics_route(registry: Registry) -> crate::health::MethodRouter {
    use std::sync::Arc;

    use axum::http::{StatusCode, header};

    let registry = Arc::new(registry);
    crate::health::get(move || {
        let registry = registry.clone();
        async move {
            match encode(&registry) {
                Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text),
                Err(error) => {
                    tracing::warn!(%error, "cannot encode the metrics");
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                        "cannot encode the metrics\n".to_owned(),
                    )
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn encodes_openmetrics_text_with_total_suffix_and_eof() {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        registry.register("verge_test_things", "Things done.", counter.clone());
        counter.inc_by(3);
        let text = encode(&registry).expect("encodes");
        assert!(
            text.contains("# TYPE verge_test_things counter\n"),
            "{text}"
        );
        assert!(text.contains("verge_test_things_total 3\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn latency_buckets_span_milliseconds_to_a_minute() {
        let buckets: Vec<f64> = latency_buckets().collect();
        assert_eq!(buckets.first(), Some(&0.005));
        assert!(buckets.last().is_some_and(|b| *b > 60.0), "{buckets:?}");
    }
}
