//! `GET /containerLogs/{namespace}/{pod}/{container}`: a container's output, as the kubelet
//! serves it to `kubectl logs` — plain text, chunked and flushed per write so `follow`
//! streams, from the runtime's log of the container instance
//! ([`StreamingRuntime::container_logs`]).
//!
//! Query parameters (`v1.PodLogOptions`, as the API server encodes them): `follow`,
//! `previous` (the instance before the current one), `timestamps` (each line prefixed
//! with an RFC 3339 time with exactly nine fractional digits and a space, the kubelet's
//! fixed-width format), `sinceSeconds`, `sinceTime` (RFC 3339; the later of the two wins),
//! `tailLines` (also the legacy `tail`, `all` or a count) and `limitBytes` (the body is cut
//! after that many bytes, timestamps included).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{StreamExt as _, stream};

use super::containers::{Containers, container_name};
use super::error::StreamError;
use verge_container_runtime::{LogOptions, StreamingRuntime};

/// What a log request asks for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LogRequest {
    follow: bool,
    previous: bool,
    timestamps: bool,
    /// Unix seconds; 0 = from the start.
    since: i64,
    /// `None`: every line.
    tail_lines: Option<u64>,
    limit_bytes: Option<u64>,
}

fn flag(query: &HashMap<String, String>, name: &'static str) -> Result<bool, StreamError> {
    match query.get(name).map(String::as_str) {
        None | Some("" | "false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(other) => Err(StreamError::BadQuery {
            name,
            reason: format!("{other:?} is not a boolean"),
        }),
    }
}

fn number(query: &HashMap<String, String>, name: &'static str) -> Result<Option<u64>, StreamError> {
    query
        .get(name)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<u64>().map_err(|e| StreamError::BadQuery {
                name,
                reason: format!("{v:?}: {e}"),
            })
        })
        .transpose()
}

impl LogRequest {
    /// Parses the query at `now` (unix seconds).
    pub(crate) fn parse(query: &HashMap<String, String>, now: i64) -> Result<Self, StreamError> {
        let mut since = 0i64;
        if let Some(seconds) = number(query, "sinceSeconds")? {
            since = now.saturating_sub(i64::try_from(seconds).unwrap_or(i64::MAX));
        }
        if let Some(time) = query.get("sinceTime").filter(|v| !v.is_empty()) {
            let parsed =
                chrono::DateTime::parse_from_rfc3339(time).map_err(|e| StreamError::BadQuery {
                    name: "sinceTime",
                    reason: format!("{time:?}: {e}"),
                })?;
            since = since.max(parsed.timestamp());
        }
        let tail_lines = match (
            number(query, "tailLines")?,
            query.get("tail").map(String::as_str),
        ) {
            (Some(n), _) => Some(n),
            (None, None | Some("" | "all" | "-1")) => None,
            (None, Some(n)) => Some(n.parse().map_err(|e| StreamError::BadQuery {
                name: "tail",
                reason: format!("{n:?}: {e}"),
            })?),
        };
        Ok(Self {
            follow: flag(query, "follow")?,
            previous: flag(query, "previous")?,
            timestamps: flag(query, "timestamps")?,
            since,
            tail_lines,
            limit_bytes: number(query, "limitBytes")?.filter(|n| *n > 0),
        })
    }
}

/// The handler of `/containerLogs/{namespace}/{pod}/{container}`.
pub(crate) async fn container_logs<R: StreamingRuntime>(
    State(containers): State<Containers<R>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match logs(&containers, &namespace, &pod_name, &container, &query).await {
        Ok(body) => body.into_response(),
        Err(error) => error.into_response(),
    }
}

async fn logs<R: StreamingRuntime>(
    containers: &Containers<R>,
    namespace: &str,
    pod_name: &str,
    container: &str,
    query: &HashMap<String, String>,
) -> Result<Body, StreamError> {
    let request = LogRequest::parse(query, chrono::Utc::now().timestamp())?;
    let pod = containers.pod(namespace, pod_name).await?;
    let container = container_name(&pod, container)?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let instances = containers
        .instances(namespace, pod_name, &uid, &container)
        .await?;
    let instance = if request.previous {
        instances
            .get(1)
            .ok_or_else(|| StreamError::PreviousNotFound {
                container: container.clone(),
                pod: pod_name.to_owned(),
            })?
    } else {
        instances.first().ok_or_else(|| StreamError::NotRunning {
            container: container.clone(),
            pod: pod_name.to_owned(),
        })?
    };
    let options = LogOptions {
        follow: request.follow && !request.previous,
        timestamps: request.timestamps,
        since: request.since,
        tail_lines: request.tail_lines,
    };
    let output = containers
        .runtime()
        .container_logs(&instance.id, options)
        .await
        .map_err(StreamError::Runtime)?;
    let output = end_apart(output);
    let body = match request.limit_bytes {
        None => Body::from_stream(output),
        Some(limit) => Body::from_stream(limited(output, limit)),
    };
    Ok(body)
}

/// `output`, ending only after one `Pending`, so that hyper flushes the last data before the
/// chunked body's terminator. Sent in one TLS record, Go's HTTP client returns both from one
/// `Read` as `(n, io.EOF)`, and the API server's websocket log copier (`wsstream`'s
/// `messageCopy`, the path of a logs request upgraded to `binary.k8s.io`) drops data that
/// comes with EOF: a short log would read back empty. The kubelet flushes each write, so its
/// terminator never shares a record with data.
fn end_apart<S>(output: S) -> impl futures::Stream<Item = S::Item> + Send + 'static
where
    S: futures::Stream + Send + 'static,
{
    let mut yielded = false;
    output.chain(stream::poll_fn(move |cx| {
        if yielded {
            return std::task::Poll::Ready(None);
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }))
}

/// The chunks of `output` up to `limit` bytes in all (the last one cut), then the end.
fn limited<E: Send + 'static>(
    output: impl futures::Stream<Item = Result<Bytes, E>> + Send + 'static,
    limit: u64,
) -> impl futures::Stream<Item = Result<Bytes, E>> + Send + 'static {
    stream::unfold((Box::pin(output), limit), |(mut output, left)| async move {
        if left == 0 {
            return None;
        }
        let chunk = output.next().await?;
        Some(match chunk {
            Ok(mut bytes) => {
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                bytes.truncate(take);
                let left = left - take as u64;
                (Ok(bytes), (output, left))
            }
            Err(error) => (Err(error), (output, 0)),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_ends_only_after_a_pending_poll() {
        use futures::Stream as _;
        use std::task::{Context, Poll};
        let data: std::io::Result<Bytes> = Ok(Bytes::from_static(b"alive\n"));
        let mut body = Box::pin(end_apart(stream::iter([data])));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            body.as_mut().poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(
            body.as_mut().poll_next(&mut cx).is_pending(),
            "flushed before the end"
        );
        assert!(matches!(
            body.as_mut().poll_next(&mut cx),
            Poll::Ready(None)
        ));
    }

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn queries_parse_as_the_api_server_sends_them() {
        let now = 1_000_000;
        let r = LogRequest::parse(
            &query(&[
                ("follow", "true"),
                ("tailLines", "5"),
                ("sinceSeconds", "10"),
                ("limitBytes", "7"),
            ]),
            now,
        )
        .expect("parses");
        assert!(r.follow && !r.previous);
        assert_eq!(
            (r.tail_lines, r.since, r.limit_bytes),
            (Some(5), now - 10, Some(7))
        );
        let r = LogRequest::parse(&query(&[("sinceTime", "1970-01-12T13:46:50Z")]), now)
            .expect("parses");
        assert_eq!(r.since, 1_000_010);
        assert!(LogRequest::parse(&query(&[("follow", "maybe")]), now).is_err());
        assert!(LogRequest::parse(&query(&[("tailLines", "-3")]), now).is_err());
        assert_eq!(
            LogRequest::parse(&query(&[("tail", "all")]), now)
                .expect("ok")
                .tail_lines,
            None
        );
    }

    #[tokio::test]
    async fn limit_bytes_cuts_the_body() {
        let chunks = stream::iter(vec![
            Ok::<_, std::io::Error>(Bytes::from_static(b"abcd")),
            Ok(Bytes::from_static(b"efgh")),
        ]);
        let body: Vec<Bytes> = limited(chunks, 6).map(|c| c.expect("ok")).collect().await;
        assert_eq!(
            body,
            vec![Bytes::from_static(b"abcd"), Bytes::from_static(b"ef")]
        );
    }
}
