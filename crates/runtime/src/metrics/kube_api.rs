//! Kubernetes API request metrics of the client `kube_client` builds (feature `kube`): a
//! tower layer on the client's HTTP stack times every request and counts it by result, like
//! client-go's `rest_client_request_duration_seconds` and `rest_client_requests_total`, but
//! labelled with the API server's own `verb` and `resource` (as in
//! `apiserver_request_total`) instead of the host.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_kube_api_request_duration_seconds` | histogram | `verb`, `resource` |
//! | `verge_kube_api_requests_total` | counter | `verb`, `resource`, `code` |
//!
//! `verb` is one of `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//! `deletecollection`, `other`; `resource` the plural resource with its subresource
//! (`pods/status`), `discovery` for paths outside `/api` and `/apis`; `code` the HTTP status
//! (`200`, `409`, ...) or `error` when no response came. A watch is timed until the API
//! server answered its request (the response headers), not for the life of the stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, Uri};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The labels of the latency histogram.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    /// The API verb (see the module docs).
    pub verb: &'static str,
    /// The plural resource, with `/<subresource>` if any.
    pub resource: String,
}

/// The labels of the request counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    /// The API verb.
    pub verb: &'static str,
    /// The plural resource, with `/<subresource>` if any.
    pub resource: String,
    /// The HTTP status code, or `error` without a response.
    pub code: String,
}

/// The Kubernetes API request series of one process (cheap to clone: the families are
/// shared).
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    duration: Family<RequestLabels, Histogram>,
    requests: Family<ResultLabels, Counter>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(|| Histogram::new(super::latency_buckets())),
            requests: Family::default(),
        }
    }
}

static GLOBAL: LazyLock<ApiMetrics> = LazyLock::new(ApiMetrics::default);

/// The process's API request series, which every client of `verge_runtime::kube_client`
/// records into.
pub fn global() -> &'static ApiMetrics {
    &GLOBAL
}

impl ApiMetrics {
    /// Registers the series into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "verge_kube_api_request_duration_seconds",
            "Latency of Kubernetes API requests until the response headers, by verb and resource.",
            self.duration.clone(),
        );
        registry.register(
            "verge_kube_api_requests",
            "Kubernetes API requests by verb, resource and HTTP status code (`error`: no response).",
            self.requests.clone(),
        );
    }

    /// The layer that records into these series (`kube::client::ClientBuilder::with_layer`).
    pub fn layer(&self) -> ApiMetricsLayer {
        ApiMetricsLayer {
            metrics: self.clone(),
        }
    }

    /// Records one request of `labels` that took `elapsed` and ended with `status` (`None`:
    /// no response).
    pub fn record(&self, labels: RequestLabels, elapsed: Duration, status: Option<u16>) {
        self.duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        let code = status.map_or_else(|| "error".to_owned(), |s| s.to_string());
        self.requests
            .get_or_create(&ResultLabels {
                verb: labels.verb,
                resource: labels.resource,
                code,
            })
            .inc();
    }
}

impl RequestLabels {
    /// The verb and resource of a request with `method` to `uri` (see the module docs).
    pub fn of(method: &Method, uri: &Uri) -> Self {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.first() {
            Some(&"api") => segments.get(2..),
            Some(&"apis") => segments.get(3..),
            _ => None,
        };
        let Some(mut rest) = rest.filter(|r| !r.is_empty()) else {
            return Self {
                verb: if *method == Method::GET {
                    "get"
                } else {
                    "other"
                },
                resource: "discovery".to_owned(),
            };
        };
        if rest.first() == Some(&"namespaces") && rest.len() > 2 {
            rest = &rest[2..];
        }
        let named = rest.len() >= 2;
        let resource = match rest.get(2) {
            Some(sub) => format!("{}/{sub}", rest[0]),
            None => rest[0].to_owned(),
        };
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = match *method {
            Method::GET if watch => "watch",
            Method::GET if named => "get",
            Method::GET => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if named => "delete",
            Method::DELETE => "deletecollection",
            _ => "other",
        };
        Self { verb, resource }
    }
}

/// A tower layer recording every request through it into [`ApiMetrics`].
#[derive(Debug, Clone)]
pub struct ApiMetricsLayer {
    metrics: ApiMetrics,
}

impl<S> tower::Layer<S> for ApiMetricsLayer {
    type Service = ApiMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`ApiMetricsLayer`].
#[derive(Debug, Clone)]
pub struct ApiMetricsService<S> {
    inner: S,
    metrics: ApiMetrics,
}

impl<S, B, RB> tower::Service<Request<B>> for ApiMetricsService<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let labels = RequestLabels::of(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let start = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let status = result.as_ref().ok().map(|r| r.status().as_u16());
            metrics.record(labels, start.elapsed(), status);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: Method, uri: &str) -> (&'static str, String) {
        let uri: Uri = uri.parse().expect("uri");
        let l = RequestLabels::of(&method, &uri);
        (l.verb, l.resource)
    }

    #[test]
    fn verbs_and_resources_follow_the_api_server() {
        let cases = [
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=1",
                "watch",
                "pods",
            ),
            (Method::GET, "/api/v1/namespaces/ns/pods", "list", "pods"),
            (Method::GET, "/api/v1/namespaces/ns/pods/web", "get", "pods"),
            (
                Method::PATCH,
                "/api/v1/namespaces/ns/pods/web/status",
                "patch",
                "pods/status",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/events",
                "create",
                "events",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/n/leases/l",
                "update",
                "leases",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods/web",
                "delete",
                "pods",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods",
                "deletecollection",
                "pods",
            ),
            (Method::GET, "/api/v1/nodes/edge-1", "get", "nodes"),
            (Method::GET, "/api/v1/namespaces/ns", "get", "namespaces"),
            (
                Method::POST,
                "/api/v1/namespaces/ns/serviceaccounts/sa/token",
                "create",
                "serviceaccounts/token",
            ),
            (Method::GET, "/version", "get", "discovery"),
            (
                Method::GET,
                "/apis/devices.kubeedge.io/v1beta1",
                "get",
                "discovery",
            ),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(labels(method, uri), (verb, resource.to_owned()), "{uri}");
        }
    }

    #[test]
    fn records_latency_and_code() {
        let metrics = ApiMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let pods = || RequestLabels {
            verb: "list",
            resource: "pods".to_owned(),
        };
        metrics.record(pods(), Duration::from_millis(12), Some(200));
        metrics.record(pods(), Duration::from_millis(3), None);
        let text = crate::metrics::encode(&registry).expect("encodes");
        for line in [
            "verge_kube_api_request_duration_seconds_count{verb=\"list\",resource=\"pods\"} 2",
            "verge_kube_api_request_duration_seconds_bucket{le=\"0.005\",verb=\"list\",resource=\"pods\"} 1",
            "verge_kube_api_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 1",
            "verge_kube_api_requests_total{verb=\"list\",resource=\"pods\",code=\"error\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
