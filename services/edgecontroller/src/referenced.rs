//! The ConfigMaps and Secrets edge pods reference, each watched as a node whose pod
//! references it (issue 31, DESIGN.md §17).
//!
//! edgecontroller does not list or watch Secrets or ConfigMaps with its own identity: a
//! compromise of it would otherwise read every Secret of the cluster. Instead, for every
//! ConfigMap and Secret referenced by a pod bound to an edge node (volumes, projected
//! sources, env, envFrom, imagePullSecrets: [`desired::references`]), one watch of that single
//! object (`fieldSelector=metadata.name=<name>`, as the kubelet's per-object watches) runs as
//! one of the nodes whose pods reference it ([`NodeClients`]). The API server's Node authorizer
//! allows exactly that: a node may read the objects its pods use, nothing else.
//!
//! Cost at scale: one watch per distinct referenced object (not per node and object: an object
//! many nodes use is watched once), multiplexed on edgecontroller's HTTP/2 connection. When
//! the node a watch runs as stops referencing the object, the watch moves to another node
//! that does (the object stays cached meanwhile); when no edge pod references it any more, the
//! watch ends and the object leaves the cache.
//!
//! The stores are ready ([`kube::runtime::reflector::Store::wait_until_ready`]) once the pod
//! and node caches are, and every object referenced then was listed once (or
//! [`INITIAL_SYNC`] passed): a resync must not tell an edge to drop an object only because its
//! watch had not answered yet. Watch failures (e.g. 403 while the API server's node graph has
//! not yet seen a new pod) are retried with backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher as watch};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info, info_span, warn};
use verge_core::{ResourceKey, ResourceType};

use crate::cache::CacheEvent;
use crate::desired;
use crate::node_clients::NodeClients;

/// How long the first sync waits for the referenced objects' first lists before the stores
/// are declared ready anyway (a watch failing that long is logged and keeps retrying).
pub const INITIAL_SYNC: Duration = Duration::from_secs(30);

/// How often the referenced set is computed again without a change of the pod or node cache.
const RESCAN: Duration = Duration::from_secs(30);

/// What one object watch saw: the object, or `None` when it does not exist (deleted, or
/// absent from a list).
struct Seen<K> {
    key: ResourceKey,
    object: Option<K>,
}

/// One object watch: the node it runs as and the token that ends it.
struct Running {
    node: String,
    stop: CancellationToken,
}

/// The watches and the store of one kind (ConfigMap or Secret).
struct Kind<K: Resource<DynamicType = ()> + Clone + 'static> {
    kind: ResourceType,
    writer: Writer<K>,
    running: HashMap<ResourceKey, Running>,
    /// Keys whose first list has not come yet.
    pending: BTreeSet<ResourceKey>,
    tx: mpsc::Sender<Seen<K>>,
}

impl<K> Kind<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    fn new(kind: ResourceType, tx: mpsc::Sender<Seen<K>>) -> Self {
        Self {
            kind,
            writer: Writer::new(()),
            running: HashMap::new(),
            pending: BTreeSet::new(),
            tx,
        }
    }

    /// Starts, moves and ends watches so that each key of `wanted` (with the nodes
    /// referencing it) runs as one of its nodes; returns the keys that left the store.
    fn reconcile(
        &mut self,
        wanted: &BTreeMap<ResourceKey, BTreeSet<String>>,
        clients: &NodeClients,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Vec<ResourceKey> {
        let mut gone = Vec::new();
        self.running.retain(|key, running| {
            let keep = wanted.get(key).is_some_and(|n| n.contains(&running.node));
            if !keep {
                running.stop.cancel();
            }
            keep
        });
        let store = self.writer.as_reader();
        let kind = self.kind;
        let stored: Vec<ResourceKey> = store
            .state()
            .iter()
            .map(|o| key_of(o.as_ref(), kind))
            .collect();
        for key in stored {
            if !wanted.contains_key(&key) {
                self.remove(&key);
                gone.push(key);
            }
        }
        self.pending.retain(|key| wanted.contains_key(key));
        for (key, nodes) in wanted {
            if self.running.contains_key(key) {
                continue;
            }
            let Some(node) = nodes.iter().next() else {
                continue;
            };
            let stop = shutdown.child_token();
            let api: Api<K> = Api::namespaced(clients.of(node), key.namespace.as_str());
            let span = info_span!("object_watch", object = %key, node = %node);
            tracker
                .spawn(watch_one(api, key.clone(), self.tx.clone(), stop.clone()).instrument(span));
            if store.get(&object_ref(key)).is_none() {
                self.pending.insert(key.clone());
            }
            self.running.insert(
                key.clone(),
                Running {
                    node: node.clone(),
                    stop,
                },
            );
        }
        gone
    }

    /// Applies what a watch saw; whether the store changed.
    fn apply(&mut self, seen: Seen<K>) -> bool {
        self.pending.remove(&seen.key);
        if !self.running.contains_key(&seen.key) {
            return false; // A late event of an ended watch.
        }
        match seen.object {
            Some(object) => {
                self.writer.apply_watcher_event(&Event::Apply(object));
                true
            }
            None => self.remove(&seen.key),
        }
    }

    /// Removes `key` from the store; whether it was there.
    fn remove(&mut self, key: &ResourceKey) -> bool {
        let Some(stored) = self.writer.as_reader().get(&object_ref(key)) else {
            return false;
        };
        self.writer
            .apply_watcher_event(&Event::Delete(stored.as_ref().clone()));
        true
    }

    /// Marks the store ready with what it holds.
    fn mark_ready(&mut self) {
        let objects = self.writer.as_reader().state();
        self.writer.apply_watcher_event(&Event::Init);
        for object in objects {
            self.writer
                .apply_watcher_event(&Event::InitApply(object.as_ref().clone()));
        }
        self.writer.apply_watcher_event(&Event::InitDone);
    }

    fn stop_all(&self) {
        for running in self.running.values() {
            running.stop.cancel();
        }
    }
}

/// The stores of referenced ConfigMaps and Secrets and the task filling them (see the module
/// docs): `pods` and `nodes` are the pod and edge-node caches, `wake` is notified at each of
/// their changes, `events` receives a [`CacheEvent::Object`] per changed object.
pub(crate) fn start(
    clients: NodeClients,
    pods: Store<Pod>,
    nodes: Store<Node>,
    wake: Arc<Notify>,
    events: mpsc::Sender<CacheEvent>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> (Store<ConfigMap>, Store<Secret>) {
    let (cm_tx, cm_rx) = mpsc::channel(256);
    let (secret_tx, secret_rx) = mpsc::channel(256);
    let configmaps = Kind::new(ResourceType::ConfigMap, cm_tx);
    let secrets = Kind::new(ResourceType::Secret, secret_tx);
    let stores = (configmaps.writer.as_reader(), secrets.writer.as_reader());
    let manager = Manager {
        clients,
        pods,
        nodes,
        events,
        tracker: tracker.clone(),
        shutdown: shutdown.clone(),
        configmaps,
        secrets,
    };
    tracker.spawn(
        manager
            .run(wake, cm_rx, secret_rx)
            .instrument(info_span!("referenced_objects")),
    );
    stores
}

struct Manager {
    clients: NodeClients,
    pods: Store<Pod>,
    nodes: Store<Node>,
    events: mpsc::Sender<CacheEvent>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    configmaps: Kind<ConfigMap>,
    secrets: Kind<Secret>,
}

impl Manager {
    async fn run(
        mut self,
        wake: Arc<Notify>,
        mut cm_rx: mpsc::Receiver<Seen<ConfigMap>>,
        mut secret_rx: mpsc::Receiver<Seen<Secret>>,
    ) {
        let shutdown = self.shutdown.clone();
        // The pod and node caches first (polled: a store may wake only one waiter).
        loop {
            let ready = async {
                let _ = self.nodes.wait_until_ready().await;
                let _ = self.pods.wait_until_ready().await;
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                r = tokio::time::timeout(Duration::from_secs(1), ready) => if r.is_ok() { break },
            }
        }
        let mut ready = false;
        let deadline = tokio::time::Instant::now() + INITIAL_SYNC;
        self.reconcile().await;
        let mut rescan = tokio::time::interval(RESCAN);
        loop {
            if !ready && (self.nothing_pending() || tokio::time::Instant::now() >= deadline) {
                if !self.nothing_pending() {
                    warn!(configmaps = ?self.configmaps.pending, secrets = ?self.secrets.pending,
                        "referenced objects not listed yet; caches declared ready anyway");
                }
                self.configmaps.mark_ready();
                self.secrets.mark_ready();
                ready = true;
                info!(
                    configmaps = self.configmaps.running.len(),
                    secrets = self.secrets.running.len(),
                    "referenced objects listed"
                );
            }
            let changed = tokio::select! {
                () = shutdown.cancelled() => break,
                () = wake.notified() => { self.reconcile().await; None }
                _ = rescan.tick() => { self.reconcile().await; None }
                () = tokio::time::sleep_until(deadline), if !ready => None,
                Some(seen) = cm_rx.recv() => {
                    let key = seen.key.clone();
                    self.configmaps.apply(seen).then_some(key)
                }
                Some(seen) = secret_rx.recv() => {
                    let key = seen.key.clone();
                    self.secrets.apply(seen).then_some(key)
                }
            };
            if let Some(key) = changed
                && ready
                && self.events.send(CacheEvent::Object(key)).await.is_err()
            {
                break;
            }
        }
        self.configmaps.stop_all();
        self.secrets.stop_all();
    }

    fn nothing_pending(&self) -> bool {
        self.configmaps.pending.is_empty() && self.secrets.pending.is_empty()
    }

    /// Computes the referenced set again and moves the watches to it.
    async fn reconcile(&mut self) {
        let mut wanted: [BTreeMap<ResourceKey, BTreeSet<String>>; 2] = Default::default();
        for pod in self.pods.state() {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if self.nodes.get(&ObjectRef::new(node)).is_none() {
                continue; // Not an edge node.
            }
            for key in desired::references(&pod) {
                let slot = match key.kind {
                    ResourceType::ConfigMap => 0,
                    ResourceType::Secret => 1,
                    _ => continue,
                };
                wanted[slot].entry(key).or_default().insert(node.to_owned());
            }
        }
        let (clients, tracker, shutdown) = (&self.clients, &self.tracker, &self.shutdown);
        let mut gone = self
            .configmaps
            .reconcile(&wanted[0], clients, tracker, shutdown);
        gone.extend(
            self.secrets
                .reconcile(&wanted[1], clients, tracker, shutdown),
        );
        let metrics = verge_controller::metrics::global();
        metrics.object_watches("configmaps", self.configmaps.running.len());
        metrics.object_watches("secrets", self.secrets.running.len());
        for key in gone {
            debug!(object = %key, "no edge pod references the object any more");
            if self.events.send(CacheEvent::Object(key)).await.is_err() {
                return;
            }
        }
    }
}

/// Watches the one object `key` through `api` (a node's client) until `stop`, sending what it
/// sees to `tx`; failures are retried with backoff.
async fn watch_one<K>(
    api: Api<K>,
    key: ResourceKey,
    tx: mpsc::Sender<Seen<K>>,
    stop: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watch::Config::default().fields(&format!("metadata.name={}", key.name));
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None);
    let mut stream = std::pin::pin!(stream);
    let mut listed = false;
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => return,
            item = stream.next() => item,
        };
        let metric = match &item {
            Some(Ok(Event::Apply(_))) => Some("apply"),
            Some(Ok(Event::Delete(_))) => Some("delete"),
            Some(Err(_)) => Some("error"),
            _ => None,
        };
        if let Some(event) = metric {
            verge_controller::metrics::global().watch_event(K::plural(&()).as_ref(), event);
        }
        let object = match item {
            None => return,
            Some(Ok(Event::Init)) => {
                listed = false;
                continue;
            }
            Some(Ok(Event::InitApply(object) | Event::Apply(object))) => {
                listed = true;
                Some(object)
            }
            Some(Ok(Event::Delete(_))) => None,
            Some(Ok(Event::InitDone)) if listed => continue,
            Some(Ok(Event::InitDone)) => None,
            Some(Err(error)) => {
                warn!(%error, "object watch failed, retrying with backoff");
                continue;
            }
        };
        let seen = Seen {
            key: key.clone(),
            object,
        };
        if tx.send(seen).await.is_err() {
            return;
        }
    }
}

fn object_ref<K: Resource<DynamicType = ()>>(key: &ResourceKey) -> ObjectRef<K> {
    ObjectRef::new(&key.name).within(key.namespace.as_str())
}

fn key_of<K: Resource>(object: &K, kind: ResourceType) -> ResourceKey {
    let meta = object.meta();
    ResourceKey::new(
        meta.namespace.as_deref().unwrap_or_default(),
        kind,
        meta.name.as_deref().unwrap_or_default(),
    )
}
