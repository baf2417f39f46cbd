//! The kubelet's read endpoints, served on the same tunnels and with the same client
//! certificates as logs and exec, so that the API server's node proxy
//! (`/api/v1/nodes/<node>/proxy/...`) and metrics-server reach edgecore as they reach a
//! kubelet:
//!
//! | path | answer |
//! |---|---|
//! | `/healthz` | `ok` |
//! | `/pods` | the node's pods as stored (a `v1` `PodList`, the kubelet's pod manager) |
//! | `/metrics/resource` | the kubelet's resource metrics (Prometheus text, timestamped) |
//! | `/stats/summary` | the Summary API (`stats/v1alpha1` JSON) |
//! | `/metrics` | edgecore's own series (OpenMetrics text) |
//! | `/metrics/probes` | `prober_probe_total` (OpenMetrics text) |
//!
//! Resource figures come from one [`Collector`] round per request (cgroups and `/proc`,
//! `verge-edge-metrics`); nothing is collected between requests.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::registry::Registry;
use verge_container_runtime::StreamingRuntime;
use verge_core::ResourceType;
use verge_edge_metrics::{Collector, Summary, resource};
use verge_edge_store::MetaStore;
use verge_runtime::metrics::metrics_route;

/// The Prometheus registries behind `/metrics` and `/metrics/probes`.
#[derive(Default)]
pub struct ServedMetrics {
    /// edgecore's series (`/metrics`).
    pub process: Registry,
    /// `prober_probe_total` (`/metrics/probes`).
    pub probes: Registry,
}

struct ReadState<R> {
    collector: Collector<R>,
    store: MetaStore,
}

/// The read endpoints' routes (see the module docs), over `collector` and `store`.
pub(crate) fn routes<R: StreamingRuntime>(
    collector: Collector<R>,
    store: MetaStore,
    metrics: ServedMetrics,
) -> Router {
    let state = Arc::new(ReadState { collector, store });
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/pods", get(pods::<R>))
        .route("/metrics/resource", get(metrics_resource::<R>))
        .route("/stats/summary", get(stats_summary::<R>))
        .with_state(state)
        .route("/metrics", metrics_route(metrics.process))
        .route("/metrics/probes", metrics_route(metrics.probes))
}

async fn metrics_resource<R: StreamingRuntime>(State(s): State<Arc<ReadState<R>>>) -> Response {
    let snapshot = s.collector.snapshot().await;
    (
        [(header::CONTENT_TYPE, resource::CONTENT_TYPE)],
        resource::render(&snapshot),
    )
        .into_response()
}

async fn stats_summary<R: StreamingRuntime>(State(s): State<Arc<ReadState<R>>>) -> Response {
    let snapshot = s.collector.summary().await;
    json(&Summary::from_snapshot(&snapshot))
}

async fn pods<R: StreamingRuntime>(State(s): State<Arc<ReadState<R>>>) -> Response {
    let stored = s.store.blocking(|s| s.list(ResourceType::Pod)).await;
    let stored = match stored {
        Ok(stored) => stored,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the pods: {e}"),
            )
                .into_response();
        }
    };
    let items: Vec<Pod> = stored
        .into_iter()
        .filter_map(|(_, o)| serde_json::from_slice(&o.content).ok())
        .collect();
    json(&serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    }))
}

/// `value` as a JSON response (500 if it cannot be written).
fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
