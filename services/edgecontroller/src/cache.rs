//! Watch caches of the API server (kube-runtime reflectors): edge Nodes, Pods bound to a node,
//! Services and EndpointSlices of all namespaces, and the ConfigMaps and Secrets edge pods
//! reference (each watched as a node using it, [`crate::referenced`]). Every edge node holds
//! every Service and EndpointSlice (its Service proxy and cluster DNS, as kube-proxy and
//! CoreDNS watch them all); the Service cache also answers the nodes' service list queries
//! (the kubelet's service informer, for the service environment variables;
//! `upstream::services`).
//!
//! Each cache is one task running `reflector(watcher(..).default_backoff())`: a broken watch
//! is re-listed with exponential backoff, so the caches survive API server restarts. After
//! the reflector updated its store, the task reports what changed as a [`CacheEvent`] to the
//! downstream side. The tasks end when the shutdown token is cancelled. Changes of the pod
//! and node caches also wake [`Caches::pods_or_nodes_changed`] (the toleration task of
//! [`crate::offline`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher as watch;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verge_controller::reflect;
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
    /// A Service or EndpointSlice was added, changed or deleted: every node holds it.
    Shared(ResourceKey),
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
    /// A Service.
    Service(Arc<Service>),
    /// An EndpointSlice.
    EndpointSlice(Arc<EndpointSlice>),
    /// Another edge node of the node's site, as [`crate::site::peer_view`] trims it.
    SitePeer(Arc<Node>),
}

impl Cached {
    /// The object's uid and resourceVersion.
    pub fn version(&self) -> Version {
        match self {
            Self::Pod(o) => Version::of(&o.metadata),
            Self::ConfigMap(o) => Version::of(&o.metadata),
            Self::Secret(o) => Version::of(&o.metadata),
            Self::Node(o) => Version::of(&o.metadata),
            Self::Service(o) => Version::of(&o.metadata),
            Self::EndpointSlice(o) => Version::of(&o.metadata),
            Self::SitePeer(o) => Version::of(&o.metadata),
        }
    }

    /// The fingerprint of what the edge acts on (everything but status and resourceVersion).
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Self::Pod(o) => Fingerprint::of(o.as_ref()),
            Self::ConfigMap(o) => Fingerprint::of(o.as_ref()),
            Self::Secret(o) => Fingerprint::of(o.as_ref()),
            Self::Node(o) => Fingerprint::of(o.as_ref()),
            Self::Service(o) => Fingerprint::of(o.as_ref()),
            Self::EndpointSlice(o) => Fingerprint::of(o.as_ref()),
            Self::SitePeer(o) => crate::site::peer_fingerprint(o),
        }
    }

    /// The object's JSON (with `apiVersion` and `kind`).
    pub fn to_json(&self) -> Vec<u8> {
        let json = match self {
            Self::Pod(o) => serde_json::to_vec(o.as_ref()),
            Self::ConfigMap(o) => serde_json::to_vec(o.as_ref()),
            Self::Secret(o) => serde_json::to_vec(o.as_ref()),
            Self::Node(o) => serde_json::to_vec(o.as_ref()),
            Self::Service(o) => serde_json::to_vec(o.as_ref()),
            Self::EndpointSlice(o) => serde_json::to_vec(o.as_ref()),
            Self::SitePeer(o) => serde_json::to_vec(o.as_ref()),
        };
        // Serializing k8s-openapi types to a Vec cannot fail.
        json.unwrap_or_default()
    }
}

/// A cache stopped before its first list (the controller is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the watch caches stopped before their first list")]
pub struct CachesStopped;

impl From<kube::runtime::reflector::store::WriterDropped> for CachesStopped {
    fn from(_: kube::runtime::reflector::store::WriterDropped) -> Self {
        Self
    }
}

/// Read handles of the caches; cheap to clone.
#[derive(Clone)]
pub struct Caches {
    /// Nodes labelled [`EDGE_NODE_LABEL`].
    pub nodes: Store<Node>,
    /// Pods with `spec.nodeName` set (field selector `spec.nodeName!=`).
    pub pods: Store<Pod>,
    /// The ConfigMaps pods on edge nodes reference ([`crate::referenced`]).
    pub configmaps: Store<ConfigMap>,
    /// The Secrets pods on edge nodes reference ([`crate::referenced`]).
    pub secrets: Store<Secret>,
    /// Services of all namespaces.
    pub services: Store<Service>,
    /// EndpointSlices of all namespaces.
    pub endpointslices: Store<EndpointSlice>,
    /// `true` once the Service and EndpointSlice caches completed their first list. Their
    /// stores are waited for by one task only (a store's readiness wakes one waiter); every
    /// other waiter watches this.
    pub shared_ready: tokio::sync::watch::Receiver<bool>,
    /// Notified (coalescing, one waiter) after any change of the pod or node cache,
    /// including the end of a (re)list.
    pub pods_or_nodes_changed: Arc<Notify>,
}

impl Caches {
    /// Starts the watch tasks on `tracker`; they report changes to `events` and end at
    /// `shutdown`. `client` (edgecontroller's own identity) needs list/watch on edge nodes,
    /// pods and services; ConfigMaps and Secrets are watched one by one as a node that uses
    /// them (`clients`, [`crate::referenced`]).
    pub fn start(
        client: &kube::Client,
        clients: &crate::node_clients::NodeClients,
        events: &mpsc::Sender<CacheEvent>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Self {
        let changed = Arc::new(Notify::new());
        let referenced_wake = Arc::new(Notify::new());
        let both = [changed.clone(), referenced_wake.clone()];
        let nodes_config = watch::Config::default().labels(EDGE_NODE_LABEL);
        let api = Api::all(client.clone());
        let (nodes, task) = reflect::cache(
            api,
            (),
            nodes_config,
            events,
            &both,
            CacheEvent::Relisted,
            |n: &Node| Some(CacheEvent::Node(n.name_any())),
        );
        reflect::spawn(tracker, shutdown, "node", task);
        let pods_config = watch::Config::default().fields("spec.nodeName!=");
        let api = Api::all(client.clone());
        let (pods, task) = reflect::cache(
            api,
            (),
            pods_config,
            events,
            &both,
            CacheEvent::Relisted,
            |p: &Pod| {
                Some(CacheEvent::Pod {
                    key: key_of(p, ResourceType::Pod),
                    node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                })
            },
        );
        reflect::spawn(tracker, shutdown, "pod", task);
        let (configmaps, secrets) = crate::referenced::start(
            clients.clone(),
            pods.clone(),
            nodes.clone(),
            referenced_wake,
            events.clone(),
            tracker,
            shutdown,
        );
        let (services, task) = reflect::cache(
            Api::all(client.clone()),
            (),
            watch::Config::default(),
            events,
            &[],
            CacheEvent::Relisted,
            |s: &Service| Some(CacheEvent::Shared(key_of(s, ResourceType::Service))),
        );
        reflect::spawn(tracker, shutdown, "service", task);
        let (endpointslices, task) = reflect::cache(
            Api::all(client.clone()),
            (),
            watch::Config::default(),
            events,
            &[],
            CacheEvent::Relisted,
            |s: &EndpointSlice| Some(CacheEvent::Shared(key_of(s, ResourceType::EndpointSlice))),
        );
        reflect::spawn(tracker, shutdown, "endpointslice", task);
        let (ready_tx, shared_ready) = tokio::sync::watch::channel(false);
        let (s, e) = (services.clone(), endpointslices.clone());
        let ready = async move {
            if s.wait_until_ready().await.is_ok() && e.wait_until_ready().await.is_ok() {
                ready_tx.send_replace(true);
            }
        };
        reflect::spawn(tracker, shutdown, "shared-ready", ready);
        Self {
            nodes,
            pods,
            configmaps,
            secrets,
            services,
            endpointslices,
            shared_ready,
            pods_or_nodes_changed: changed,
        }
    }

    /// Resolves once every cache of objects sent down completed its first list.
    ///
    /// Until then only one task at a time can wait: kube-runtime's store readiness keeps a
    /// single waker, so of two concurrent waiters one may never be woken. Other tasks should
    /// watch [`Caches::pods_or_nodes_changed`] instead.
    ///
    /// # Errors
    /// [`CachesStopped`] when a watch task ended before its first list (shutdown).
    pub async fn wait_ready(&self) -> Result<(), CachesStopped> {
        // The referenced-object stores are made ready only after the node and pod caches
        // ([`crate::referenced`]), which they wait for themselves.
        self.configmaps
            .wait_until_ready()
            .await
            .map_err(|_| CachesStopped)?;
        self.secrets
            .wait_until_ready()
            .await
            .map_err(|_| CachesStopped)?;
        self.wait_shared_ready().await
    }

    /// Resolves once the Service and EndpointSlice caches completed their first list
    /// ([`Caches::shared_ready`]); any number of tasks may wait.
    ///
    /// # Errors
    /// [`CachesStopped`] when the caches stopped before their first list (shutdown).
    pub async fn wait_shared_ready(&self) -> Result<(), CachesStopped> {
        let mut ready = self.shared_ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| CachesStopped)
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
            ResourceType::Service => self
                .services
                .get(&ObjectRef::new(&key.name).within(ns))
                .map(Cached::Service),
            ResourceType::EndpointSlice => self
                .endpointslices
                .get(&ObjectRef::new(&key.name).within(ns))
                .map(Cached::EndpointSlice),
            _ => None,
        }
    }

    /// Whether `node` is a known edge node.
    pub fn is_edge_node(&self, node: &str) -> bool {
        self.nodes.get(&ObjectRef::new(node)).is_some()
    }
}

fn key_of<K: Resource>(object: &K, kind: ResourceType) -> ResourceKey {
    ResourceKey::new(
        object.namespace().unwrap_or_default(),
        kind,
        object.name_any(),
    )
}
