//! The container runtime: a thin layer over [`bollard::Docker`] (what dockershim / cri-dockerd
//! did for the kubelet). Every container edged creates carries the labels of [`labels`], so
//! pods are found again by label after a restart of edgecore.
//!
//! # Layout
//! - [`labels`]: the labels and names tying containers to pods.
//! - [`image`]: image pull policy and pulls with `imagePullSecrets` credentials.
//! - [`spec`]: `v1.Container` -> Docker create body (command/args, env, binds, resources,
//!   securityContext), and the sandbox (infra) container.

pub mod image;
pub mod labels;
pub mod spec;

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, EventMessage,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, EventsOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures::Stream;

use crate::{Error, Result};

/// Seconds bollard waits for one API call (stops wait up to the grace period on top).
const CALL_TIMEOUT_SECS: u64 = 120;

/// The Docker engine as edged uses it, scoped to one node; cheap to clone.
///
/// Every container it creates carries the label [`labels::MANAGED`] with the node's name, and
/// it lists and watches only those, so several edgecores sharing one engine (as in tests)
/// never see, adopt or remove each other's containers.
#[derive(Debug, Clone)]
pub struct Runtime {
    docker: Docker,
    node: String,
}

/// Wraps a bollard error with the call that failed.
pub(crate) fn docker_err(what: impl Into<String>) -> impl FnOnce(DockerError) -> Error {
    let what = what.into();
    move |source| Error::Docker { what, source }
}

/// Whether `e` is Docker's "no such container/image" (HTTP 404).
pub fn is_not_found(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl Runtime {
    /// Connects to `endpoint` (`unix://...`, `tcp://...`, `http://...`), or the local socket
    /// when `None` ([`Docker::connect_with_local_defaults`]), and negotiates the API version
    /// (the engine may be older than bollard, e.g. API 1.41 of Docker 20.10).
    ///
    /// # Errors
    /// [`Error::Docker`] if the endpoint is malformed or the engine does not answer.
    pub async fn connect(endpoint: Option<&str>, node: &str) -> Result<Self> {
        let docker = match endpoint {
            None => Docker::connect_with_local_defaults(),
            Some(host) => Docker::connect_with_host(host),
        }
        .map_err(docker_err("connect"))?
        .with_timeout(Duration::from_secs(CALL_TIMEOUT_SECS));
        let docker = docker
            .negotiate_version()
            .await
            .map_err(docker_err("negotiate API version"))?;
        Ok(Self {
            docker,
            node: node.to_owned(),
        })
    }

    /// The `label=value` filter that selects this node's containers.
    fn managed_filter(&self) -> String {
        format!("{}={}", labels::MANAGED, self.node)
    }

    /// The bollard client (e.g. for exec probes).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// `docker://<engine version>`, as the kubelet reports `nodeInfo.containerRuntimeVersion`.
    ///
    /// # Errors
    /// [`Error::Docker`] if the engine does not answer.
    pub async fn version(&self) -> Result<String> {
        let v = self.docker.version().await.map_err(docker_err("version"))?;
        Ok(format!(
            "docker://{}",
            v.version.unwrap_or_else(|| "unknown".into())
        ))
    }

    /// Every container edged manages (running or not), or only those of pod `pod_uid`.
    ///
    /// # Errors
    /// [`Error::Docker`] if the list fails.
    pub async fn list(&self, pod_uid: Option<&str>) -> Result<Vec<ContainerSummary>> {
        let mut label = vec![self.managed_filter()];
        if let Some(uid) = pod_uid {
            label.push(format!("{}={uid}", labels::POD_UID));
        }
        let filters = HashMap::from([("label", label)]);
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        self.docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err("list containers"))
    }

    /// Inspects container `id`; `None` if it does not exist.
    ///
    /// # Errors
    /// [`Error::Docker`] for any other failure.
    pub async fn inspect(&self, id: &str) -> Result<Option<ContainerInspectResponse>> {
        match self.docker.inspect_container(id, None).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(docker_err(format!("inspect {id}"))(e)),
        }
    }

    /// Creates container `name` from `body`; returns its id.
    ///
    /// # Errors
    /// [`Error::Docker`] (e.g. a name conflict, a missing image).
    pub async fn create(&self, name: &str, mut body: ContainerCreateBody) -> Result<String> {
        body.labels
            .get_or_insert_with(HashMap::new)
            .insert(labels::MANAGED.to_owned(), self.node.clone());
        let opts = CreateContainerOptionsBuilder::default().name(name).build();
        let created = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(docker_err(format!("create {name}")))?;
        Ok(created.id)
    }

    /// Starts container `id`.
    ///
    /// # Errors
    /// [`Error::Docker`] (e.g. the command does not exist in the image).
    pub async fn start(&self, id: &str) -> Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(docker_err(format!("start {id}")))
    }

    /// Stops container `id`: SIGTERM (or the image's stop signal), then SIGKILL after `grace`
    /// (whole seconds, rounded up; kubelet `terminationGracePeriodSeconds`). A container that
    /// is already stopped or gone is fine.
    ///
    /// # Errors
    /// [`Error::Docker`] for any other failure.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let secs = i32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0))
            .unwrap_or(i32::MAX);
        let opts = StopContainerOptionsBuilder::default().t(secs).build();
        match self.docker.stop_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 304 | 404,
                ..
            }) => Ok(()),
            Err(e) => Err(docker_err(format!("stop {id}"))(e)),
        }
    }

    /// Removes container `id` (forcibly, with its anonymous volumes); a missing one is fine.
    ///
    /// # Errors
    /// [`Error::Docker`] for any other failure.
    pub async fn remove(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // 409: removal already in progress.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(()),
            Err(e) => Err(docker_err(format!("remove {id}"))(e)),
        }
    }

    /// Docker events of edged's containers: `start`, `die`, `oom`, `destroy`. Ends (or
    /// yields errors) when the engine goes away; the caller re-subscribes.
    pub fn events(&self) -> impl Stream<Item = Result<EventMessage, DockerError>> + use<> {
        let filters = HashMap::from([
            ("type", vec!["container".to_owned()]),
            ("label", vec![self.managed_filter()]),
            (
                "event",
                ["start", "die", "oom", "destroy"]
                    .map(str::to_owned)
                    .to_vec(),
            ),
        ]);
        let opts = EventsOptionsBuilder::default().filters(&filters).build();
        self.docker.events(Some(opts))
    }
}
