//! Watches the node serves while the link is down.
//!
//! A watch of what the node holds ([`crate::local`]) sends `ADDED`, `MODIFIED` and `DELETED`
//! events for the changes since the API server's versions of the objects, looked at every
//! [`POLL`]: the node's own changes (a pod's status edged reports while it waits in the
//! outbox for the cloud), including those made before the watch opened; with
//! `allowWatchBookmarks=true` it sends a `BOOKMARK` every [`BOOKMARK_INTERVAL`] at the
//! resourceVersion the client asked for. A watch of anything else sends nothing. Either ends
//! when the link is back (or at the client's `timeoutSeconds`): the client watches again from
//! its last resourceVersion, now through the API server, which sends what changed in the
//! cloud meanwhile, with no new list (a list only if the API server no longer has that
//! resourceVersion, `410 Gone`, as after any long watch gap).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use verge_edge_store::MetaStore;
use verge_edgehub::SessionInfo;

use crate::local::{self, Held};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::upstream::Body;

/// How often a watch looks at the store for changes.
pub const POLL: Duration = Duration::from_secs(1);

/// How long a watch lasts that opened while a session was up (the API server was
/// unreachable through it, e.g. just after a heal before the connection is made): the
/// client then watches again soon, most likely through the API server.
pub const SESSION_UP_WATCH: Duration = Duration::from_secs(10);

/// How often a watch that allows bookmarks gets one.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// What a watch asks for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The resource, if the node holds it.
    pub held: Option<Held>,
    /// Its namespace (all if `None`).
    pub namespace: Option<String>,
    /// Only this object (a `metadata.name` field selector).
    pub name: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `resourceVersion` the client watches from.
    pub resource_version: String,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
}

/// An event line: `{"type": kind, "object": object}` and a newline.
fn event(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({ "type": kind, "object": object }).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// The objects a watch sees now, by `namespace/name`, with their JSON text for comparison;
/// pods with the node's pending status if `overlay`.
async fn snapshot(
    store: &MetaStore,
    request: &WatchRequest,
    overlay: bool,
) -> BTreeMap<String, (String, Value)> {
    let Some(held) = request.held else {
        return BTreeMap::new();
    };
    let (store, r) = (store.clone(), request.clone());
    let listed = store
        .blocking(move |s| {
            Ok::<_, verge_edge_store::Error>(
                local::list(
                    s,
                    held,
                    r.namespace.as_deref(),
                    &r.labels,
                    &r.fields,
                    overlay,
                )
                .0,
            )
        })
        .await
        .unwrap_or_default();
    listed
        .into_iter()
        .filter_map(|object| {
            let ns = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = object.pointer("/metadata/name").and_then(Value::as_str)?;
            if request.name.as_deref().is_some_and(|n| n != name) {
                return None;
            }
            Some((format!("{ns}/{name}"), (object.to_string(), object)))
        })
        .collect()
}

/// The streaming answer to `request` (see the module docs); ends when `sessions` has a new
/// session.
pub fn serve(
    store: MetaStore,
    request: WatchRequest,
    mut sessions: watch::Receiver<Option<SessionInfo>>,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, hyper::Error>>(16);
    verge_runtime::tasks::spawn("edge api offline watch", async move {
        let send = |bytes: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(Frame::data(bytes))).await.is_ok() }
        };
        // What the client has seen: at most the API server's versions (from its list, at or
        // before the cut), so the node's own changes not yet in the cloud come as events.
        let mut seen = snapshot(&store, &request, false).await;
        let started = tokio::time::Instant::now();
        let mut poll = tokio::time::interval(POLL);
        let mut bookmark = tokio::time::interval_at(started + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
        // Back online: a session, other than one that was up when the watch opened (the API
        // server was unreachable through it).
        let opened_in = sessions.borrow().as_ref().map(|s| s.generation);
        let deadline = [request.timeout, opened_in.map(|_| SESSION_UP_WATCH)]
            .into_iter()
            .flatten()
            .min()
            .map(|t| started + t);
        let online = async move {
            let _ = sessions
                .wait_for(|s| s.as_ref().is_some_and(|s| Some(s.generation) != opened_in))
                .await
                .map(|_| ());
        };
        tokio::pin!(online);
        loop {
            tokio::select! {
                () = &mut online => return,
                () = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => return,
                () = tx.closed() => return,
                _ = bookmark.tick(), if request.bookmarks && request.held.is_some() => {
                    let Some(held) = request.held else { continue };
                    let object = json!({
                        "apiVersion": held.api_version,
                        "kind": held.object_kind,
                        "metadata": { "resourceVersion": request.resource_version },
                    });
                    if !send(event("BOOKMARK", &object)).await {
                        return;
                    }
                }
                _ = poll.tick(), if request.held.is_some() => {
                    let now = snapshot(&store, &request, true).await;
                    let mut lines = Vec::new();
                    for (key, (text, object)) in &now {
                        match seen.get(key) {
                            None => lines.push(event("ADDED", object)),
                            Some((before, _)) if before != text => lines.push(event("MODIFIED", object)),
                            Some(_) => {}
                        }
                    }
                    for (key, (_, object)) in &seen {
                        if !now.contains_key(key) {
                            lines.push(event("DELETED", object));
                        }
                    }
                    seen = now;
                    for line in lines {
                        if !send(line).await {
                            return;
                        }
                    }
                }
            }
        }
    });
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed();
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
