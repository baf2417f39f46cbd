//! Which runtime container a kubelet streaming request means: the pod (from the store, as
//! the kubelet reads its pod manager) and its containers' instances (by the labels edged
//! puts on them, `verge-container-runtime`'s `labels`).

use k8s_openapi::api::core::v1::Pod;
use verge_core::{ResourceKey, ResourceType};

use super::error::StreamError;
use verge_container_runtime::{ContainerSummary, ListFilter, StreamingRuntime, labels};
use verge_edge_store::MetaStore;

/// One instance of a container (a restart makes a new one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Instance {
    /// The runtime's id.
    pub id: String,
    /// Restarts before this instance.
    pub restart_count: u32,
    /// Whether it runs now.
    pub running: bool,
}

/// The value of label `key` of container `c`.
fn label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels.get(key).map(String::as_str)
}

/// Looks pods and containers up on this node.
#[derive(Clone)]
pub(crate) struct Containers<R> {
    runtime: R,
    store: MetaStore,
}

impl<R: StreamingRuntime> Containers<R> {
    /// Lookups in `store` and on `runtime` (scoped to this node's containers).
    pub(crate) fn new(runtime: R, store: MetaStore) -> Self {
        Self { runtime, store }
    }

    /// The container runtime.
    pub(crate) fn runtime(&self) -> &R {
        &self.runtime
    }

    /// Pod `namespace/name` as stored.
    ///
    /// # Errors
    /// [`StreamError::PodNotFound`] (404 `pod "<name>" does not exist`, the kubelet's text).
    pub(crate) async fn pod(&self, namespace: &str, name: &str) -> Result<Pod, StreamError> {
        let key = ResourceKey::new(namespace, ResourceType::Pod, name);
        let stored = self
            .store
            .blocking(move |s| s.get(&key))
            .await
            .map_err(|e| StreamError::Store(e.to_string()))?;
        stored
            .and_then(|o| serde_json::from_slice::<Pod>(&o.content).ok())
            .ok_or_else(|| StreamError::PodNotFound(name.to_owned()))
    }

    /// The instances of `container` of pod `namespace/pod` (uid `uid`), newest first.
    ///
    /// # Errors
    /// [`StreamError::Runtime`] when the runtime fails.
    pub(crate) async fn instances(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> Result<Vec<Instance>, StreamError> {
        let listed = self
            .runtime
            .list(&ListFilter::pod(uid))
            .await
            .map_err(StreamError::Runtime)?;
        let mut instances: Vec<Instance> = listed
            .into_iter()
            .filter(|c| {
                label(c, labels::POD_NAMESPACE) == Some(namespace)
                    && label(c, labels::POD_NAME) == Some(pod)
                    && label(c, labels::CONTAINER_NAME) == Some(container)
            })
            .map(|c| Instance {
                restart_count: label(&c, labels::RESTART_COUNT)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                running: c.state == "running",
                id: c.id,
            })
            .collect();
        instances.sort_by_key(|i| std::cmp::Reverse(i.restart_count));
        Ok(instances)
    }

    /// The process id of the running container holding the network namespace of pod
    /// `namespace/pod`: its sandbox (infra) container, or for a pod without a sandbox the one
    /// container that holds the namespace itself (labelled with its pod IP).
    ///
    /// # Errors
    /// [`StreamError::NotRunning`] when neither runs, [`StreamError::Runtime`].
    pub(crate) async fn sandbox_pid(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
    ) -> Result<u32, StreamError> {
        let not_running = || StreamError::NotRunning {
            container: labels::SANDBOX_NAME.to_owned(),
            pod: pod.to_owned(),
        };
        let listed = self
            .runtime
            .list(&ListFilter::pod(uid))
            .await
            .map_err(StreamError::Runtime)?;
        let holders = listed.iter().filter(|c| {
            c.state == "running"
                && label(c, labels::POD_NAMESPACE) == Some(namespace)
                && label(c, labels::POD_NAME) == Some(pod)
        });
        let sandbox =
            |c: &&ContainerSummary| label(c, labels::CONTAINER_NAME) == Some(labels::SANDBOX_NAME);
        let holder = holders
            .clone()
            .find(sandbox)
            .or_else(|| holders.clone().find(|c| label(c, labels::POD_IP).is_some()))
            .ok_or_else(not_running)?;
        self.runtime
            .process_id(&holder.id)
            .await
            .map_err(StreamError::Runtime)?
            .ok_or_else(not_running)
    }
}

/// The spec's container name: `container`, or the pod's only container when empty.
///
/// # Errors
/// [`StreamError::ContainerNotFound`] when the spec has no such container (init and
/// ephemeral containers count), [`StreamError::ContainerRequired`] when `container` is
/// empty and the pod has several.
pub(crate) fn container_name(pod: &Pod, container: &str) -> Result<String, StreamError> {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut names = spec
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect::<Vec<_>>();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    if container.is_empty() {
        return match names.as_slice() {
            [only] => Ok(only.clone()),
            _ => Err(StreamError::ContainerRequired(pod_name)),
        };
    }
    names.extend(
        spec.init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name),
    );
    names.extend(
        spec.ephemeral_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name),
    );
    if names.iter().any(|n| n == container) {
        Ok(container.to_owned())
    } else {
        Err(StreamError::ContainerNotFound {
            container: container.to_owned(),
            pod: pod_name,
        })
    }
}
