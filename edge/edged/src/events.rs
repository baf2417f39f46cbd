//! Pod events as the kubelet records them (`kubectl describe pod` shows them): `v1.Event`s
//! about a pod or one of its containers, reported upstream as `insert <ns>/event/<name>`
//! (docs/protocol.md).
//!
//! Like the kubelet's event correlator, a repeat of the same (pod, container, type, reason,
//! message) within [`AGGREGATE_WINDOW`] reuses the first event's name with `count` and
//! `lastTimestamp` bumped (edgecontroller creates events and treats AlreadyExists as done, so
//! the API server keeps the first occurrence). Each pod has a token bucket ([`BURST`], one
//! token per [`REFILL`]): events beyond it are dropped (repeats still count, and the next one
//! sent carries the total). Memory is bounded by [`MAX_TRACKED`] and by [`Recorder::forget`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tokio::time::Instant;
use tracing::{debug, warn};
use verge_core::{ResourceKey, ResourceType, Write};

use super::status::report;
use verge_container_runtime::labels::PodRef;
use verge_edgehub::EdgeHubHandle;

/// Repeats within this window bump the first event's count (kubelet: 10 minutes).
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);

/// Events a pod may send at once.
pub const BURST: f64 = 12.0;

/// One more event of a pod may be sent per this interval once its burst is spent.
pub const REFILL: Duration = Duration::from_secs(1);

/// Most (pod, reason, message) entries kept; the oldest are dropped beyond it.
pub const MAX_TRACKED: usize = 4096;

/// Longest message kept (probe output can be long).
const MAX_MESSAGE: usize = 1024;

/// `source.component` (the kubelet's).
const COMPONENT: &str = "kubelet";

/// `reportingComponent`.
const REPORTING: &str = "verge-edgecore";

/// `type` of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Routine: Pulling, Pulled, Created, Started, Killing, image BackOff.
    Normal,
    /// Something went wrong: Failed, crash BackOff, Unhealthy, FailedMount.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// What an event is about: (pod uid, fieldPath, type, reason, message).
type Key = (String, String, EventType, &'static str, String);

/// An event already sent or dropped, for aggregation.
#[derive(Debug)]
struct Seen {
    name: String,
    first: Time,
    count: i32,
    last: Instant,
}

/// A pod's token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    seen: HashMap<Key, Seen>,
    buckets: HashMap<String, Bucket>,
    /// The last name suffix handed out (unique, increasing).
    last_suffix: u64,
}

/// Records pod events; shared by the pod workers.
#[derive(Debug)]
pub struct Recorder {
    hub: EdgeHubHandle,
    node: String,
    inner: Mutex<Inner>,
}

/// `spec.containers{name}` (or `spec.initContainers{name}`), the kubelet's fieldPath.
pub fn field_path(container: &str, init: bool) -> String {
    let list = if init { "initContainers" } else { "containers" };
    format!("spec.{list}{{{container}}}")
}

impl Recorder {
    /// A recorder for node `node` sending through `hub`.
    pub fn new(hub: EdgeHubHandle, node: &str) -> Self {
        Self {
            hub,
            node: node.to_owned(),
            inner: Mutex::default(),
        }
    }

    /// Records an event about `pod`, or about one of its containers when `field_path` is
    /// set (see [`field_path`]). Never waits: it is dropped when rate-limited or when the
    /// upstream queue is full.
    pub fn record(
        &self,
        pod: &PodRef,
        field_path: Option<String>,
        type_: EventType,
        reason: &'static str,
        message: impl Into<String>,
    ) {
        let mut message: String = message.into();
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let now = Instant::now();
        let wall = Time(verge_edge_store::clock::now());
        let key: Key = (
            pod.uid.clone(),
            field_path.clone().unwrap_or_default(),
            type_,
            reason,
            message.clone(),
        );
        let (name, first, count) = {
            let mut inner = self.lock();
            if !inner.seen.contains_key(&key) && inner.seen.len() >= MAX_TRACKED {
                inner.evict(now);
            }
            let Inner {
                seen,
                buckets,
                last_suffix,
            } = &mut *inner;
            let mut fresh = || Seen {
                name: unique_name(last_suffix, &pod.name),
                first: wall.clone(),
                count: 0,
                last: now,
            };
            let seen = seen.entry(key).or_insert_with(&mut fresh);
            if now.duration_since(seen.last) > AGGREGATE_WINDOW {
                *seen = fresh();
            }
            seen.count = seen.count.saturating_add(1);
            seen.last = now;
            let out = (seen.name.clone(), seen.first.clone(), seen.count);
            if !take_token(buckets, &pod.uid, now) {
                debug!(pod = %pod.name, reason, "event rate-limited");
                return;
            }
            out
        };
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                field_path,
                ..ObjectReference::default()
            },
            reason: Some(reason.to_owned()),
            message: Some(message),
            type_: Some(type_.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some(REPORTING.into()),
            reporting_instance: Some(self.node.clone()),
            first_timestamp: Some(first),
            last_timestamp: Some(wall),
            count: Some(count),
            ..Event::default()
        };
        self.emit(
            &ResourceKey::new(&pod.namespace, ResourceType::Event, &name),
            &event,
        );
    }

    /// Forgets the events and the rate limit of pod `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        let mut inner = self.lock();
        inner.seen.retain(|k, _| k.0 != uid);
        inner.buckets.remove(uid);
    }

    /// Sends `event` upstream as `insert <ns>/event/<name>` (the one place events leave).
    fn emit(&self, key: &ResourceKey, event: &Event) {
        let content = match serde_json::to_vec(event) {
            Ok(c) => c,
            Err(e) => return warn!(error = %e, "event not encoded"),
        };
        let msg = report(Write::Insert, key, content);
        // Durable, coalesced by event name (a repeat bumps `count` of the same name).
        if let Err(e) = self.hub.try_report(msg) {
            debug!(event = %key, error = %e, "event dropped");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `<pod>.<16 hex digits>`: the wall clock in nanoseconds, kept increasing in `last` (kubelet:
/// `<name>.<UnixNano in hex>`).
fn unique_name(last: &mut u64, pod: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    *last = nanos.max(last.saturating_add(1));
    // Object names are at most 253 characters.
    let mut end = pod.len().min(253 - 17);
    while !pod.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{:016x}", &pod[..end], *last)
}

/// Takes a token of pod `uid`'s bucket, if it has one.
fn take_token(buckets: &mut HashMap<String, Bucket>, uid: &str, now: Instant) -> bool {
    let b = buckets.entry(uid.to_owned()).or_insert(Bucket {
        tokens: BURST,
        at: now,
    });
    let refill = now.duration_since(b.at).as_secs_f64() / REFILL.as_secs_f64();
    b.tokens = (b.tokens + refill).min(BURST);
    b.at = now;
    if b.tokens < 1.0 {
        return false;
    }
    b.tokens -= 1.0;
    true
}

impl Inner {
    /// Drops entries older than the window, and the oldest half if that was not enough.
    fn evict(&mut self, now: Instant) {
        self.seen
            .retain(|_, s| now.duration_since(s.last) <= AGGREGATE_WINDOW);
        if self.seen.len() >= MAX_TRACKED {
            let mut ages: Vec<Instant> = self.seen.values().map(|s| s.last).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            self.seen.retain(|_, s| s.last > cut);
        }
    }
}

#[cfg(test)]
mod tests;
