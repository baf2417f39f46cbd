//! Watch caches of the API server (kube-runtime reflectors): Devices and DeviceModels of all
//! namespaces (`devices.kubeedge.io/v1beta1`, kept as [`DynamicObject`]s so that the JSON
//! sent to the edge is the object as the API server returns it, fields this controller does
//! not know included) and edge Nodes.
//!
//! Each cache is one task running `reflector(watcher(..).default_backoff())`: a broken watch
//! is re-listed with exponential backoff (also while the CRDs are not installed yet). After
//! the reflector updated its store, the task reports what changed as a [`CacheEvent`] to the
//! downstream task. The tasks end when the shutdown token is cancelled.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};
use verge_core::{EDGE_NODE_LABEL, ResourceKey, ResourceType};

use crate::desired;

/// A change seen by a cache, after its store was updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// A Device was added, changed or deleted; `node` is its `spec.nodeName` in the event.
    Device {
        /// The Device's key (`<ns>/device/<name>`).
        key: ResourceKey,
        /// The node it is bound to, per the event.
        node: Option<String>,
    },
    /// A DeviceModel was added, changed or deleted (`<ns>/devicemodel/<name>`).
    Model(ResourceKey),
    /// An edge Node was added, changed or deleted; its name.
    Node(String),
    /// A cache finished a (re)list: deletions during a watch outage are only visible now,
    /// so everything is evaluated again.
    Relisted,
}

/// `devices.kubeedge.io/v1beta1` kind `kind` with plural `plural`.
fn resource(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(verge_device_api::GROUP, verge_device_api::VERSION, kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// The Device resource (`devices`).
pub fn device_resource() -> ApiResource {
    resource("Device", "devices")
}

/// The DeviceModel resource (`devicemodels`).
pub fn model_resource() -> ApiResource {
    resource("DeviceModel", "devicemodels")
}

/// The DeviceStatus resource (`devicestatuses`).
pub fn status_resource() -> ApiResource {
    resource("DeviceStatus", "devicestatuses")
}

/// Read handles of the caches; cheap to clone.
#[derive(Clone)]
pub struct Caches {
    /// Devices of all namespaces.
    pub devices: Store<DynamicObject>,
    /// DeviceModels of all namespaces.
    pub models: Store<DynamicObject>,
    /// Nodes labelled [`EDGE_NODE_LABEL`].
    pub nodes: Store<Node>,
}

impl Caches {
    /// Starts the three watch tasks on `tracker`; they report changes to `events` and end at
    /// `shutdown`. Needs list/watch on `devices` and `devicemodels` of
    /// `devices.kubeedge.io` and on nodes.
    pub fn start(
        client: &kube::Client,
        events: &mpsc::Sender<CacheEvent>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Self {
        let ar = device_resource();
        let api = Api::all_with(client.clone(), &ar);
        let (devices, task) = cache(api, ar, watch::Config::default(), events, |d| {
            Some(CacheEvent::Device {
                key: desired::device_key(d),
                node: desired::node_name(d).map(str::to_owned),
            })
        });
        spawn_cache(tracker, shutdown, "device", task);
        let ar = model_resource();
        let api = Api::all_with(client.clone(), &ar);
        let (models, task) = cache(api, ar, watch::Config::default(), events, |m| {
            Some(CacheEvent::Model(desired::model_key_of(m)))
        });
        spawn_cache(tracker, shutdown, "devicemodel", task);
        let config = watch::Config::default().labels(EDGE_NODE_LABEL);
        let (nodes, task) = cache(Api::all(client.clone()), (), config, events, |n: &Node| {
            Some(CacheEvent::Node(n.name_any()))
        });
        spawn_cache(tracker, shutdown, "node", task);
        Self {
            devices,
            models,
            nodes,
        }
    }

    /// Resolves once every cache completed its first list. Only one task at a time may wait
    /// (kube-runtime's store readiness keeps a single waker).
    ///
    /// # Errors
    /// When a watch task ended before its first list (shutdown).
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.devices.wait_until_ready().await?;
        self.models.wait_until_ready().await?;
        self.nodes.wait_until_ready().await
    }

    /// The Devices bound to `node` (`spec.nodeName`).
    pub fn devices_on(&self, node: &str) -> Vec<Arc<DynamicObject>> {
        self.devices
            .state_filter(|d| desired::node_name(d) == Some(node))
    }

    /// The cached Device `namespace/name`.
    pub fn device(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.devices
            .get(&ObjectRef::new_with(name, device_resource()).within(namespace))
    }

    /// The cached DeviceModel `namespace/name`.
    pub fn model(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.models
            .get(&ObjectRef::new_with(name, model_resource()).within(namespace))
    }

    /// The cached Device or DeviceModel of `key`.
    pub fn get(&self, key: &ResourceKey) -> Option<Arc<DynamicObject>> {
        match key.kind {
            ResourceType::Device => self.device(&key.namespace, &key.name),
            ResourceType::DeviceModel => self.model(&key.namespace, &key.name),
            _ => None,
        }
    }

    /// Whether `node` is a known edge node.
    pub fn is_edge_node(&self, node: &str) -> bool {
        self.nodes.get(&ObjectRef::new(node)).is_some()
    }
}

/// Runs one cache `task` on `tracker` until `shutdown`.
fn spawn_cache(
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

/// A store of `K` and the future that fills it and reports changes.
fn cache<K, F>(
    api: Api<K>,
    dyntype: K::DynamicType,
    config: watch::Config,
    events: &mpsc::Sender<CacheEvent>,
    to_event: F,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
    F: Fn(&K) -> Option<CacheEvent> + Send + 'static,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .modify(|o: &mut K| o.managed_fields_mut().clear());
    let task = forward(
        reflector::reflector(writer, stream),
        events.clone(),
        to_event,
    );
    (store, task)
}

/// Reports every event of the reflector `stream` to `events` until it or the receiver ends.
async fn forward<K, F>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    events: mpsc::Sender<CacheEvent>,
    to_event: F,
) where
    F: Fn(&K) -> Option<CacheEvent>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(Event::Apply(o) | Event::Delete(o)) => to_event(&o),
            Ok(Event::InitDone) => {
                info!("cache listed");
                Some(CacheEvent::Relisted)
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
