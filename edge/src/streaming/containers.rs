//! Which Docker container a kubelet streaming request means: the pod (from the store, as
//! the kubelet reads its pod manager) and its containers' instances (by the labels edged
//! puts on them, `edged/runtime/labels.rs`).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;
use k8s_openapi::api::core::v1::Pod;
use verge_core::{ResourceKey, ResourceType};

use super::error::StreamError;
use crate::edged::runtime::labels;
use verge_edge_store::MetaStore;

/// One instance of a container (a restart makes a new one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Instance {
    /// Docker's id.
    pub id: String,
    /// Restarts before this instance.
    pub restart_count: u32,
    /// Whether it runs now.
    pub running: bool,
}

/// Looks pods and containers up on this node.
#[derive(Clone)]
pub(crate) struct Containers {
    docker: Docker,
    store: MetaStore,
    node: String,
}

impl Containers {
    /// Lookups in `store` and on `docker` for the containers of `node`.
    pub(crate) fn new(docker: Docker, store: MetaStore, node: String) -> Self {
        Self {
            docker,
            store,
            node,
        }
    }

    /// Agrees on the Docker API version with the engine (it may be older than bollard);
    /// keeps bollard's when the engine does not answer.
    pub(crate) async fn negotiate(&mut self) {
        match self.docker.clone().negotiate_version().await {
            Ok(docker) => self.docker = docker,
            Err(error) => {
                tracing::warn!(%error, "streaming: cannot negotiate the Docker API version")
            }
        }
    }

    /// The Docker client.
    pub(crate) fn docker(&self) -> &Docker {
        &self.docker
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

    /// The instances of `container` of pod `namespace/pod` (uid `uid`), newest first.
    ///
    /// # Errors
    /// [`StreamError::Docker`] when the engine fails.
    pub(crate) async fn instances(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> Result<Vec<Instance>, StreamError> {
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![
                format!("{}={}", labels::MANAGED, self.node),
                format!("{}={namespace}", labels::POD_NAMESPACE),
                format!("{}={pod}", labels::POD_NAME),
                format!("{}={uid}", labels::POD_UID),
                format!("{}={container}", labels::CONTAINER_NAME),
            ],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let listed = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(StreamError::Docker)?;
        let mut instances: Vec<Instance> = listed
            .into_iter()
            .filter_map(|c| {
                let restart_count = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::RESTART_COUNT))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                Some(Instance {
                    id: c.id?,
                    restart_count,
                    running: c.state.is_some_and(|s| s.to_string() == "running"),
                })
            })
            .collect();
        instances.sort_by_key(|i| std::cmp::Reverse(i.restart_count));
        Ok(instances)
    }

    /// The process id of the running sandbox (infra) container of pod `namespace/pod`,
    /// whose network namespace the pod's containers share.
    ///
    /// # Errors
    /// [`StreamError::NotRunning`] without a running sandbox, [`StreamError::Docker`].
    pub(crate) async fn sandbox_pid(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
    ) -> Result<u32, StreamError> {
        let sandboxes = self
            .instances(namespace, pod, uid, labels::SANDBOX_NAME)
            .await?;
        let sandbox =
            sandboxes
                .into_iter()
                .find(|s| s.running)
                .ok_or_else(|| StreamError::NotRunning {
                    container: labels::SANDBOX_NAME.to_owned(),
                    pod: pod.to_owned(),
                })?;
        let inspected = self
            .docker
            .inspect_container(&sandbox.id, None)
            .await
            .map_err(StreamError::Docker)?;
        inspected
            .state
            .and_then(|s| s.pid)
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0)
            .ok_or_else(|| StreamError::NotRunning {
                container: labels::SANDBOX_NAME.to_owned(),
                pod: pod.to_owned(),
            })
    }
}
