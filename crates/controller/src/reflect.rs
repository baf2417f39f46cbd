//! Watch caches as every controller starts them: a reflector [`Store`] of one resource,
//! filled by a watcher with backoff (managed fields dropped), whose changes are turned into
//! the controller's own cache events ([`cache`]), each run as a task until shutdown
//! ([`spawn`]).

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};

/// Runs one cache `task` on `tracker` until `shutdown`, in a span `cache` with `kind =
/// name`.
pub fn spawn(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    name: &'static str,
    task: impl Future<Output = ()> + Send + 'static,
) {
    let stop = shutdown.clone();
    tracker.spawn(
        async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = task => {}
            }
        }
        .instrument(info_span!("cache", kind = name)),
    );
}

/// A store of `K` (of `dyntype`) and the future that fills it and reports its changes to
/// `events`: `to_event` of every added, changed or deleted object, `relisted` after every
/// completed (re)list; each of `changed` is woken by each of them. A failed watch is
/// logged and retried with backoff; the future ends when the receiver of `events` closed.
pub fn cache<K, V, F>(
    api: Api<K>,
    dyntype: K::DynamicType,
    config: watch::Config,
    events: &mpsc::Sender<V>,
    changed: &[Arc<Notify>],
    relisted: V,
    to_event: F,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
    V: Clone + Send + 'static,
    F: Fn(&K) -> Option<V> + Send + 'static,
{
    let dyntype_for_label = dyntype.clone();
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .modify(|o: &mut K| o.managed_fields_mut().clear());
    let resource = K::plural(&dyntype_for_label).into_owned();
    let task = forward(
        resource,
        reflector::reflector(writer, stream),
        events.clone(),
        changed.to_vec(),
        relisted,
        to_event,
    );
    (store, task)
}

/// Reports every event of the reflector `stream` to `events` (and wakes `changed`) until it
/// or the receiver ends.
async fn forward<K, V, F>(
    resource: String,
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    events: mpsc::Sender<V>,
    changed: Vec<Arc<Notify>>,
    relisted: V,
    to_event: F,
) where
    V: Clone,
    F: Fn(&K) -> Option<V>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        if let Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) = &item {
            for changed in &changed {
                changed.notify_one();
            }
        }
        let metric = match &item {
            Ok(Event::Apply(_)) => Some("apply"),
            Ok(Event::Delete(_)) => Some("delete"),
            Ok(Event::InitDone) => Some("relisted"),
            Ok(Event::Init | Event::InitApply(_)) => None,
            Err(_) => Some("error"),
        };
        if let Some(event) = metric {
            crate::metrics::global().watch_event(&resource, event);
        }
        let event = match item {
            Ok(Event::Apply(o) | Event::Delete(o)) => to_event(&o),
            Ok(Event::InitDone) => {
                info!("cache listed");
                Some(relisted.clone())
            }
            Ok(Event::Init | Event::InitApply(_)) => None,
            Err(error) => {
                warn!(%error, "watch failed, retrying with backoff");
                None
            }
        };
        if let Some(event) = event
            && events.send(event).await.is_err()
        {
            return;
        }
    }
}
