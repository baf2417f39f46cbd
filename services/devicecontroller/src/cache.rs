//! Watch caches of the API server (kube-runtime reflectors): Devices and DeviceModels of all
//! namespaces (`devices.kubeedge.io/v1beta1`, kept as [`DynamicObject`]s so that the JSON
//! sent to the edge is the object as the API server returns it, fields this controller does
//! not know included) and edge Nodes.
//!
//! Each cache is one task running `reflector(watcher(..).default_backoff())`: a broken watch
//! is re-listed with exponential backoff (also while the CRDs are not installed yet). After
//! the reflector updated its store, the task reports what changed as a [`CacheEvent`] to the
//! downstream task. The tasks end when the shutdown token is cancelled.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher as watch;
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verge_controller::reflect;
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
        let (devices, task) = reflect::cache(
            api,
            ar,
            watch::Config::default(),
            events,
            &[],
            CacheEvent::Relisted,
            |d| {
                Some(CacheEvent::Device {
                    key: desired::device_key(d),
                    node: desired::node_name(d).map(str::to_owned),
                })
            },
        );
        reflect::spawn(tracker, shutdown, "device", task);
        let ar = model_resource();
        let api = Api::all_with(client.clone(), &ar);
        let (models, task) = reflect::cache(
            api,
            ar,
            watch::Config::default(),
            events,
            &[],
            CacheEvent::Relisted,
            |m| Some(CacheEvent::Model(desired::model_key_of(m))),
        );
        reflect::spawn(tracker, shutdown, "devicemodel", task);
        let config = watch::Config::default().labels(EDGE_NODE_LABEL);
        let (nodes, task) = reflect::cache(
            Api::all(client.clone()),
            (),
            config,
            events,
            &[],
            CacheEvent::Relisted,
            |n: &Node| Some(CacheEvent::Node(n.name_any())),
        );
        reflect::spawn(tracker, shutdown, "node", task);
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
