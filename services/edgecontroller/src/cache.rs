//! Watch caches of the API server (kube-runtime reflectors): edge Nodes, Pods bound to a node,
//! ConfigMaps and Secrets of all namespaces.
//!
//! Each cache is one task running `reflector(watcher(..).default_backoff())`: a broken watch
//! is re-listed with exponential backoff, so the caches survive API server restarts. After
//! the reflector updated its store, the task reports what changed as a [`CacheEvent`] to the
//! downstream side. The tasks end when the shutdown token is cancelled. Changes of the pod
//! and node caches also wake [`Caches::pods_or_nodes_changed`] (the toleration task of
//! [`crate::offline`]).

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};
use verge_core::{ResourceKey, ResourceType};

use crate::desired::Version;
use crate::fingerprint::Fingerprint;

pub use verge_core::EDGE_NODE_LABEL;

/// A change seen by a cache, after its store was updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// A pod was added, changed or deleted; `node` is its `spec.nodeName` in the event.
    Pod {
        /// The pod's key.
        key: ResourceKey,
        /// The node it is bound to, per the event.
        node: Option<String>,
    },
    /// A configmap or secret was added, changed or deleted.
    Object(ResourceKey),
    /// An edge Node object was added, changed (status included) or deleted (or lost the edge
    /// label); the node's name.
    Node(String),
    /// A cache finished a (re)list: deletions during a watch outage are only visible now,
    /// so every node is compared again.
    Relisted,
}

/// An object from the caches, ready to be sent down.
#[derive(Debug, Clone)]
pub enum Cached {
    /// A pod.
    Pod(Arc<Pod>),
    /// A configmap.
    ConfigMap(Arc<ConfigMap>),
    /// A secret.
    Secret(Arc<Secret>),
    /// A node's own Node object.
    Node(Arc<Node>),
}

impl Cached {
    /// The object's uid and resourceVersion.
    pub fn version(&self) -> Version {
        match self {
            Self::Pod(o) => Version::of(&o.metadata),
            Self::ConfigMap(o) => Version::of(&o.metadata),
            Self::Secret(o) => Version::of(&o.metadata),
            Self::Node(o) => Version::of(&o.metadata),
        }
    }

    /// The fingerprint of what the edge acts on (everything but status and resourceVersion).
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Self::Pod(o) => Fingerprint::of(o.as_ref()),
            Self::ConfigMap(o) => Fingerprint::of(o.as_ref()),
            Self::Secret(o) => Fingerprint::of(o.as_ref()),
            Self::Node(o) => Fingerprint::of(o.as_ref()),
        }
    }

    /// The object's JSON (with `apiVersion` and `kind`).
    pub fn to_json(&self) -> Vec<u8> {
        let json = match self {
            Self::Pod(o) => serde_json::to_vec(o.as_ref()),
            Self::ConfigMap(o) => serde_json::to_vec(o.as_ref()),
            Self::Secret(o) => serde_json::to_vec(o.as_ref()),
            Self::Node(o) => serde_json::to_vec(o.as_ref()),
        };
        // Serializing k8s-openapi types to a Vec cannot fail.
        json.unwrap_or_default()
    }
}

/// Read handles of the four caches; cheap to clone.
#[derive(Clone)]
pub struct Caches {
    /// Nodes labelled [`EDGE_NODE_LABEL`].
    pub nodes: Store<Node>,
    /// Pods with `spec.nodeName` set (field selector `spec.nodeName!=`).
    pub pods: Store<Pod>,
    /// ConfigMaps of all namespaces.
    pub configmaps: Store<ConfigMap>,
    /// Secrets of all namespaces.
    pub secrets: Store<Secret>,
    /// Notified (coalescing, one waiter) after any change of the pod or node cache,
    /// including the end of a (re)list.
    pub pods_or_nodes_changed: Arc<Notify>,
}

impl Caches {
    /// Starts the four watch tasks on `tracker`; they report changes to `events` and end at
    /// `shutdown`. Needs list/watch on nodes, pods, configmaps and secrets.
    pub fn start(
        client: &kube::Client,
        events: &mpsc::Sender<CacheEvent>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Self {
        let changed = Arc::new(Notify::new());
        let nodes_config = watch::Config::default().labels(EDGE_NODE_LABEL);
        let api = Api::all(client.clone());
        let (nodes, task) = cache(api, nodes_config, events, Some(&changed), |n: &Node| {
            Some(CacheEvent::Node(n.name_any()))
        });
        spawn_cache(tracker, shutdown, "node", task);
        let pods_config = watch::Config::default().fields("spec.nodeName!=");
        let api = Api::all(client.clone());
        let (pods, task) = cache(api, pods_config, events, Some(&changed), |p: &Pod| {
            Some(CacheEvent::Pod {
                key: key_of(p, ResourceType::Pod),
                node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            })
        });
        spawn_cache(tracker, shutdown, "pod", task);
        let (configmaps, task) = cache(
            Api::all(client.clone()),
            watch::Config::default(),
            events,
            None,
            |c: &ConfigMap| Some(CacheEvent::Object(key_of(c, ResourceType::ConfigMap))),
        );
        spawn_cache(tracker, shutdown, "configmap", task);
        let (secrets, task) = cache(
            Api::all(client.clone()),
            watch::Config::default(),
            events,
            None,
            |s: &Secret| Some(CacheEvent::Object(key_of(s, ResourceType::Secret))),
        );
        spawn_cache(tracker, shutdown, "secret", task);
        Self {
            nodes,
            pods,
            configmaps,
            secrets,
            pods_or_nodes_changed: changed,
        }
    }

    /// Resolves once every cache completed its first list.
    ///
    /// Until then only one task at a time can wait: kube-runtime's store readiness keeps a
    /// single waker, so of two concurrent waiters one may never be woken. Other tasks should
    /// watch [`Caches::pods_or_nodes_changed`] instead.
    ///
    /// # Errors
    /// When a watch task ended before its first list (shutdown).
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        self.secrets.wait_until_ready().await
    }

    /// The pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods
            .state_filter(|p| crate::desired::is_bound_to(p, node))
    }

    /// The cached object of a pod, configmap, secret or edge node key.
    pub fn get(&self, key: &ResourceKey) -> Option<Cached> {
        let ns = key.namespace.as_str();
        match key.kind {
            ResourceType::Pod => self
                .pods
                .get(&ObjectRef::new(&key.name).within(ns))
                .map(Cached::Pod),
            ResourceType::ConfigMap => self
                .configmaps
                .get(&ObjectRef::new(&key.name).within(ns))
                .map(Cached::ConfigMap),
            ResourceType::Secret => self
                .secrets
                .get(&ObjectRef::new(&key.name).within(ns))
                .map(Cached::Secret),
            ResourceType::Node if key.k8s_namespace().is_none() => {
                self.nodes.get(&ObjectRef::new(&key.name)).map(Cached::Node)
            }
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

fn key_of<K: Resource>(object: &K, kind: ResourceType) -> ResourceKey {
    ResourceKey::new(
        object.namespace().unwrap_or_default(),
        kind,
        object.name_any(),
    )
}

/// A store of `K` and the future that fills it, reports changes and notifies `changed`.
fn cache<K, F>(
    api: Api<K>,
    config: watch::Config,
    events: &mpsc::Sender<CacheEvent>,
    changed: Option<&Arc<Notify>>,
    to_event: F,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(&K) -> Option<CacheEvent> + Send + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .modify(|o: &mut K| o.managed_fields_mut().clear());
    let events = events.clone();
    let changed = changed.cloned();
    let task = forward(
        reflector::reflector(writer, stream),
        events,
        changed,
        to_event,
    );
    (store, task)
}

/// Reports every event of the reflector `stream` to `events` (and wakes `changed`) until it
/// or the receiver ends.
async fn forward<K, F>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    events: mpsc::Sender<CacheEvent>,
    changed: Option<Arc<Notify>>,
    to_event: F,
) where
    F: Fn(&K) -> Option<CacheEvent>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        if let (Some(changed), Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone)) =
            (&changed, &item)
        {
            changed.notify_one();
        }
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
