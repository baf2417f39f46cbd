//! Traces as Jaeger's HTTP query API returns them (`/api/traces`, `/api/traces/{id}`), and
//! the typed [`Trace`] and [`Span`] the tests read.
//!
//! The wire format is the JSON model of Jaeger's query service (the one its UI reads): a
//! trace is `{traceID, spans, processes}`; a span names its process by `processID` (a key of
//! `processes`, whose `serviceName` is the OpenTelemetry resource's `service.name`) and its
//! parent by a `CHILD_OF` entry in `references`; times are microseconds since the Unix
//! epoch; tags are `{key, type, value}`. OTLP span attributes become tags; the span kind is
//! the tag `span.kind`, the status `otel.status_code`.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

/// The envelope of every query API answer: `{"data": ..., "errors": [...]}`.
#[derive(Debug, Deserialize)]
pub(super) struct Envelope<T> {
    /// The answer; `null` on errors.
    pub(super) data: Option<T>,
    /// `[{code, msg}]` on errors.
    #[serde(default)]
    pub(super) errors: Option<Vec<ApiError>>,
}

/// One entry of [`Envelope::errors`].
#[derive(Debug, Deserialize)]
pub(super) struct ApiError {
    #[serde(default)]
    pub(super) code: i64,
    #[serde(default)]
    pub(super) msg: String,
}

/// A trace on the wire.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireTrace {
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(default)]
    spans: Vec<WireSpan>,
    #[serde(default)]
    processes: HashMap<String, WireProcess>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpan {
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
    operation_name: String,
    #[serde(default)]
    references: Vec<WireReference>,
    start_time: u64,
    duration: u64,
    #[serde(default)]
    tags: Vec<WireTag>,
    #[serde(rename = "processID", default)]
    process_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReference {
    ref_type: String,
    #[serde(rename = "spanID")]
    span_id: String,
}

#[derive(Debug, Deserialize)]
struct WireTag {
    key: String,
    #[serde(default)]
    value: serde_json::Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireProcess {
    service_name: String,
}

/// One trace: its id and its spans, sorted by start time.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The W3C trace id as 32 lowercase hex digits (Jaeger's JSON omits leading zeros;
    /// they are put back, see [`normalize_trace_id`]).
    pub trace_id: String,
    /// The spans, by start time then span id.
    pub spans: Vec<Span>,
}

/// One span, with its service resolved and its parent taken from its references.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The trace id (hex, as [`Trace::trace_id`]).
    pub trace_id: String,
    /// The span id, 16 lowercase hex digits.
    pub span_id: String,
    /// The span id of the parent (the `CHILD_OF` reference, else the first reference), `None`
    /// for a root span.
    pub parent_span_id: Option<String>,
    /// The span name (`operationName`).
    pub operation_name: String,
    /// The emitting service (`service.name` of the OpenTelemetry resource).
    pub service_name: String,
    /// Start, microseconds since the Unix epoch.
    pub start_time_us: u64,
    /// Duration in microseconds.
    pub duration_us: u64,
    /// Tags (span attributes, `span.kind`, `otel.status_code`, ...), by key; values as JSON
    /// (strings, numbers, booleans).
    pub tags: BTreeMap<String, serde_json::Value>,
}

impl Span {
    /// The tag `key` when it is a string.
    pub fn tag_str(&self, key: &str) -> Option<&str> {
        self.tags.get(key).and_then(serde_json::Value::as_str)
    }
}

impl Trace {
    /// The spans named `operation_name`.
    pub fn spans_named<'a>(&'a self, operation_name: &'a str) -> impl Iterator<Item = &'a Span> {
        self.spans
            .iter()
            .filter(move |s| s.operation_name == operation_name)
    }

    /// The span with id `span_id`.
    pub fn span(&self, span_id: &str) -> Option<&Span> {
        self.spans.iter().find(|s| s.span_id == span_id)
    }

    /// The spans without a parent in this trace (normally exactly one, the root).
    pub fn roots(&self) -> impl Iterator<Item = &Span> {
        self.spans.iter().filter(|s| {
            s.parent_span_id
                .as_deref()
                .is_none_or(|p| self.span(p).is_none())
        })
    }

    /// The distinct service names of the spans, sorted.
    pub fn services(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.spans.iter().map(|s| s.service_name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl From<WireTrace> for Trace {
    fn from(wire: WireTrace) -> Self {
        let WireTrace {
            trace_id,
            spans,
            processes,
        } = wire;
        let mut spans: Vec<Span> = spans
            .into_iter()
            .map(|s| {
                let parent = s
                    .references
                    .iter()
                    .find(|r| r.ref_type == "CHILD_OF")
                    .or_else(|| s.references.first())
                    .map(|r| r.span_id.clone());
                Span {
                    service_name: processes
                        .get(&s.process_id)
                        .map(|p| p.service_name.clone())
                        .unwrap_or_default(),
                    trace_id: normalize_trace_id(&s.trace_id),
                    span_id: s.span_id,
                    parent_span_id: parent,
                    operation_name: s.operation_name,
                    start_time_us: s.start_time,
                    duration_us: s.duration,
                    tags: s.tags.into_iter().map(|t| (t.key, t.value)).collect(),
                }
            })
            .collect();
        spans.sort_by(|a, b| (a.start_time_us, &a.span_id).cmp(&(b.start_time_us, &b.span_id)));
        Self {
            trace_id: normalize_trace_id(&trace_id),
            spans,
        }
    }
}

/// A trace id as 32 lowercase hex digits, the W3C `traceparent` form: Jaeger prints the
/// high and low 64 bits without leading zeros of the high half (and a 64-bit id as 16
/// digits), so shorter ids are left-padded with zeros.
pub fn normalize_trace_id(id: &str) -> String {
    format!("{:0>32}", id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-span trace in the shape `/api/traces` returns.
    const SAMPLE: &str = r#"{"data":[{"traceID":"0af7651916cd43dd8448eb211c80319c","spans":[
      {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331","operationName":"child",
       "references":[{"refType":"CHILD_OF","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7"}],
       "startTime":1700000000000100,"duration":50,"tags":[{"key":"k8s.pod.name","type":"string","value":"p-1"},
       {"key":"attempt","type":"int64","value":2}],"logs":[],"processID":"p2","warnings":null,"flags":1},
      {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7","operationName":"root",
       "references":[],"startTime":1700000000000000,"duration":300,"tags":[],"logs":[],"processID":"p1","warnings":null}],
      "processes":{"p1":{"serviceName":"edgecontroller","tags":[]},"p2":{"serviceName":"cloudhub","tags":[]}},
      "warnings":null}],"total":0,"limit":0,"offset":0,"errors":null}"#;

    #[test]
    fn trace_ids_are_padded_to_32_digits() {
        assert_eq!(normalize_trace_id("ABC"), format!("{}abc", "0".repeat(29)));
        let full = "0af7651916cd43dd8448eb211c80319c";
        assert_eq!(normalize_trace_id(full), full);
    }

    #[test]
    fn parses_and_links_spans() -> anyhow::Result<()> {
        let envelope: Envelope<Vec<WireTrace>> = serde_json::from_str(SAMPLE)?;
        let traces: Vec<Trace> = envelope
            .data
            .unwrap_or_default()
            .into_iter()
            .map(Trace::from)
            .collect();
        assert_eq!(traces.len(), 1);
        let trace = &traces[0];
        assert_eq!(trace.spans[0].operation_name, "root");
        assert_eq!(trace.spans[0].service_name, "edgecontroller");
        assert_eq!(trace.spans[0].parent_span_id, None);
        let child = &trace.spans[1];
        assert_eq!(child.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(child.service_name, "cloudhub");
        assert_eq!(child.tag_str("k8s.pod.name"), Some("p-1"));
        assert_eq!(child.tags.get("attempt"), Some(&serde_json::json!(2)));
        assert_eq!(
            (child.start_time_us, child.duration_us),
            (1_700_000_000_000_100, 50)
        );
        assert_eq!(trace.roots().count(), 1);
        assert_eq!(trace.services(), ["cloudhub", "edgecontroller"]);
        Ok(())
    }
}
