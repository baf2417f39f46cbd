//! [`Jaeger`], the handle of a running Jaeger, and its client of the HTTP query API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use super::Ports;
use super::model::{Envelope, Trace, WireTrace, normalize_trace_id};

/// How long one query API request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A running Jaeger all-in-one on loopback: its endpoints and a client of its HTTP query
/// API. Cheap to clone. Dropping it leaves Jaeger running
/// ([`super::JaegerConfig::down`] stops it).
#[derive(Debug, Clone)]
pub struct Jaeger {
    version: String,
    pid: u32,
    ports: Ports,
    log: PathBuf,
    client: Client<HttpConnector, Empty<Bytes>>,
}

/// A search of `/api/traces`: the traces with a span of `service` (and `operation`, and
/// every tag of `tags`) that started within the last `lookback`, newest first, at most
/// `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceQuery {
    /// The service name (`service.name` of the resource); required by Jaeger.
    pub service: String,
    /// The span name, if any.
    pub operation: Option<String>,
    /// Tags a span must carry, e.g. `k8s.pod.name` → `hello-edge-...` (Jaeger's `tags`
    /// parameter; all must match on one span).
    pub tags: BTreeMap<String, String>,
    /// How far back from now to search. Default 1 h.
    pub lookback: Duration,
    /// The most traces returned. Default 20.
    pub limit: u32,
}

impl TraceQuery {
    /// The traces of `service` within the last hour, at most 20.
    pub fn service(service: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            operation: None,
            tags: BTreeMap::new(),
            lookback: Duration::from_secs(3600),
            limit: 20,
        }
    }

    /// Also require a span named `operation`.
    #[must_use]
    pub fn operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Also require the tag `key` = `value` on the matching span.
    #[must_use]
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Search the last `lookback` instead of the last hour.
    #[must_use]
    pub fn lookback(mut self, lookback: Duration) -> Self {
        self.lookback = lookback;
        self
    }

    /// The `/api/traces?...` path and query of this search, at `now`.
    fn path(&self, now: SystemTime) -> anyhow::Result<String> {
        let end = now.duration_since(UNIX_EPOCH)?;
        let start = end.saturating_sub(self.lookback);
        let mut path = format!(
            "/api/traces?service={}&start={}&end={}&limit={}",
            encode(&self.service),
            start.as_micros(),
            end.as_micros(),
            self.limit,
        );
        if let Some(op) = &self.operation {
            path.push_str(&format!("&operation={}", encode(op)));
        }
        if !self.tags.is_empty() {
            path.push_str(&format!(
                "&tags={}",
                encode(&serde_json::to_string(&self.tags)?)
            ));
        }
        Ok(path)
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Jaeger {
    pub(super) fn new(version: String, pid: u32, ports: Ports, log: PathBuf) -> Self {
        Self {
            version,
            pid,
            ports,
            log,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The Jaeger release, e.g. `"1.76.0"`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The all-in-one process's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The ports it listens on (`127.0.0.1`).
    pub fn ports(&self) -> Ports {
        self.ports
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The OTLP/gRPC endpoint for exporters, `http://127.0.0.1:4317` (the value of a
    /// binary's `tracing.otlpEndpoint`).
    pub fn otlp_grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.otlp_grpc)
    }

    /// The OTLP/HTTP base URL, `http://127.0.0.1:4318` (traces go to `/v1/traces`).
    pub fn otlp_http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.otlp_http)
    }

    /// The query service's base URL, `http://127.0.0.1:16686`: the UI (a placeholder page
    /// in a source build, see the [module docs](super)) and `/api/*`.
    pub fn ui_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.query_http)
    }

    /// The UI's page of one trace, `<ui>/trace/<id>`.
    pub fn trace_url(&self, trace_id: &str) -> String {
        format!("{}/trace/{}", self.ui_url(), normalize_trace_id(trace_id))
    }

    /// The services that reported spans (`/api/services`), sorted.
    ///
    /// # Errors
    /// Jaeger does not answer, or answers with an error.
    pub async fn services(&self) -> anyhow::Result<Vec<String>> {
        let mut services: Vec<String> = self
            .get_json::<Vec<String>>("/api/services")
            .await?
            .unwrap_or_default();
        services.sort();
        Ok(services)
    }

    /// The traces of `service` that started within `lookback` (at most 20, newest first).
    ///
    /// # Errors
    /// Jaeger does not answer, or answers with an error.
    pub async fn traces(&self, service: &str, lookback: Duration) -> anyhow::Result<Vec<Trace>> {
        self.find_traces(&TraceQuery::service(service).lookback(lookback))
            .await
    }

    /// The traces matching `query` (`/api/traces`).
    ///
    /// # Errors
    /// Jaeger does not answer, or answers with an error.
    pub async fn find_traces(&self, query: &TraceQuery) -> anyhow::Result<Vec<Trace>> {
        let path = query.path(SystemTime::now())?;
        let traces: Vec<WireTrace> = self.get_json(&path).await?.unwrap_or_default();
        Ok(traces.into_iter().map(Trace::from).collect())
    }

    /// The trace `trace_id` (hex, any case, leading zeros optional), `None` when Jaeger has
    /// no span of it (yet: the collector stores spans a moment after it receives them).
    ///
    /// # Errors
    /// Jaeger does not answer, or answers with an error other than not found.
    pub async fn trace(&self, trace_id: &str) -> anyhow::Result<Option<Trace>> {
        let path = format!("/api/traces/{}", normalize_trace_id(trace_id));
        let traces: Option<Vec<WireTrace>> = self.get_json(&path).await?;
        Ok(traces
            .unwrap_or_default()
            .into_iter()
            .next()
            .map(Trace::from))
    }

    /// Whether the admin health check (`:14269/`) answers 200 ("Server available").
    pub async fn is_healthy(&self) -> bool {
        let url = format!("http://127.0.0.1:{}/", self.ports.admin);
        matches!(self.get(&url).await, Ok((status, _)) if status.is_success())
    }

    /// GETs `path` of the query API and decodes the envelope's `data`; `None` on 404.
    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Option<T>> {
        let url = format!("{}{path}", self.ui_url());
        let (status, body) = self.get(&url).await?;
        if status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let envelope: Envelope<T> = serde_json::from_slice(&body).with_context(|| {
            format!(
                "decoding GET {url} ({status}): {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )
        })?;
        if let Some(errors) = envelope.errors.filter(|e| !e.is_empty()) {
            let msgs: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.msg))
                .collect();
            bail!("GET {url}: {status}: {}", msgs.join("; "));
        }
        if !status.is_success() {
            bail!("GET {url}: {status}");
        }
        Ok(envelope.data)
    }

    /// One GET with [`REQUEST_TIMEOUT`]: status and body.
    async fn get(&self, url: &str) -> anyhow::Result<(http::StatusCode, Bytes)> {
        let uri: http::Uri = url.parse().with_context(|| format!("parsing {url}"))?;
        let request = async {
            let response = self.client.get(uri).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, request)
            .await
            .with_context(|| format!("GET {url} took over {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("GET {url}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_path_encodes_service_and_tags() -> anyhow::Result<()> {
        let now = UNIX_EPOCH + Duration::from_secs(7200);
        let path = TraceQuery::service("edge core")
            .operation("pod.sync")
            .tag("k8s.pod.name", "hello-1")
            .lookback(Duration::from_secs(60))
            .path(now)?;
        assert_eq!(
            path,
            "/api/traces?service=edge%20core&start=7140000000&end=7200000000&limit=20\
             &operation=pod.sync&tags=%7B%22k8s.pod.name%22%3A%22hello-1%22%7D"
        );
        Ok(())
    }
}
