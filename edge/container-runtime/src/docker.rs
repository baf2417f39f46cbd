//! [`DockerRuntime`]: [`ContainerRuntime`] over the Docker engine API through bollard. This
//! module, its [`StreamingRuntime`](super::StreamingRuntime) half (`docker_streaming`, with
//! `docker_logfile`), its resource updates (`docker_resources`), its conversions
//! (`docker_convert`) and the image helpers are the only code of edgecore that speaks
//! bollard.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, EventsOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptions, LogsOptions, RemoveContainerOptionsBuilder, RemoveImageOptions,
    StopContainerOptionsBuilder,
};
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};

use super::docker_convert::{
    body, event, info, layer_dirs, network_matches, network_request, pull_options,
};
use super::types::{
    ContainerInfo, ContainerSpec, ContainerSummary, ExecOutput, ImageInfo, ImageSummary,
    LinuxResources, ListFilter, NetworkEnsured, NetworkSpec, RegistryAuth, RuntimeEvent, Scope,
};
use super::{ContainerRuntime, Result, RuntimeError, labels};

/// Seconds bollard waits for one API call (stops wait up to the grace period on top).
const CALL_TIMEOUT_SECS: u64 = 120;

/// The first Docker API version with mounts of type `image` (Docker 28.0).
const IMAGE_MOUNTS_API: (usize, usize) = (1, 48);

/// The Docker engine, scoped to one node; cheap to clone. See [`ContainerRuntime`].
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    pub(super) docker: Docker,
    node: String,
    /// Whether the engine mounts images ([`ContainerRuntime::supports_image_mounts`]), asked
    /// once.
    image_mounts: Arc<tokio::sync::OnceCell<bool>>,
}

/// A failed pull of `image`: [`RuntimeError::RegistryUnreachable`] when the engine's own
/// message (an error response, or an error in the pull's progress stream) says the registry
/// could not be reached ([`registry_unreachable`](super::image::registry_unreachable));
/// otherwise as [`err`]. A failure to reach the engine itself is never taken for it.
fn pull_err(image: &str) -> impl FnOnce(DockerError) -> RuntimeError {
    let op = format!("pull {image}");
    move |e| {
        let message = match &e {
            DockerError::DockerResponseServerError { message, .. } => Some(message.as_str()),
            DockerError::DockerStreamError { error } => Some(error.as_str()),
            _ => None,
        };
        if message.is_some_and(super::image::registry_unreachable) {
            return RuntimeError::RegistryUnreachable {
                op,
                source: Box::new(e),
            };
        }
        err(op)(e)
    }
}

/// Wraps a bollard error with the call that failed, by HTTP status (404, 409, other).
pub(super) fn err(op: impl Into<String>) -> impl FnOnce(DockerError) -> RuntimeError {
    let op = op.into();
    move |e| {
        let status = match &e {
            DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
            _ => None,
        };
        let source = Box::new(e);
        match status {
            Some(404) => RuntimeError::NotFound { op, source },
            Some(409) => RuntimeError::Conflict { op, source },
            _ => RuntimeError::Engine { op, source },
        }
    }
}

impl DockerRuntime {
    /// Connects to `endpoint` (`unix://...`, `tcp://...`, `http://...`), or the local socket
    /// when `None`, for node `node`, and negotiates the API version (the engine may be older
    /// than bollard, e.g. API 1.41 of Docker 20.10).
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the endpoint is malformed or the engine does not answer.
    pub async fn connect(endpoint: Option<&str>, node: &str) -> Result<Self> {
        Self::with_timeout(endpoint, node, Duration::from_secs(CALL_TIMEOUT_SECS))?
            .negotiate()
            .await
    }

    /// A client of `endpoint` (as [`connect`](Self::connect) takes it) for node `node`
    /// whose every call may last up to `timeout` (the streaming server's calls last as long
    /// as a followed log or an exec does), without reaching the engine yet (nothing is sent
    /// until the first call) and without version negotiation ([`negotiate`](Self::negotiate)).
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the endpoint is malformed.
    pub fn with_timeout(endpoint: Option<&str>, node: &str, timeout: Duration) -> Result<Self> {
        let docker = match endpoint {
            None => Docker::connect_with_local_defaults(),
            Some(host) => Docker::connect_with_host(host),
        }
        .map_err(err("connect"))?
        .with_timeout(timeout);
        Ok(Self {
            docker,
            node: node.to_owned(),
            image_mounts: Arc::default(),
        })
    }

    /// The local socket for node `node`, without reaching the engine yet (nothing is sent
    /// until the first call) and without version negotiation.
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the local defaults are unusable.
    pub fn local(node: &str) -> Result<Self> {
        Self::with_timeout(None, node, Duration::from_secs(CALL_TIMEOUT_SECS))
    }

    /// The same client speaking the engine's API version when the engine is older than
    /// bollard (e.g. API 1.41 of Docker 20.10).
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the engine does not answer.
    pub async fn negotiate(self) -> Result<Self> {
        let docker = self
            .docker
            .negotiate_version()
            .await
            .map_err(err("negotiate API version"))?;
        Ok(Self { docker, ..self })
    }

    /// The `label=value` filter that selects this node's containers.
    fn managed_filter(&self) -> String {
        format!("{}={}", labels::MANAGED, self.node)
    }
}

impl ContainerRuntime for DockerRuntime {
    async fn version(&self) -> Result<String> {
        let v = self.docker.version().await.map_err(err("version"))?;
        Ok(format!(
            "docker://{}",
            v.version.unwrap_or_else(|| "unknown".into())
        ))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ContainerSummary>> {
        let mut label = Vec::new();
        if filter.scope == Scope::Node {
            label.push(self.managed_filter());
        }
        if let Some(uid) = &filter.pod_uid {
            label.push(format!("{}={uid}", labels::POD_UID));
        } else if filter.pods_only {
            label.push(labels::POD_UID.to_owned());
        }
        let mut filters = HashMap::new();
        if !label.is_empty() {
            filters.insert("label".to_owned(), label);
        }
        if filter.dead_only {
            let dead = ["created", "exited", "dead"].map(str::to_owned).to_vec();
            filters.insert("status".to_owned(), dead);
        }
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let listed = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(err("list containers"))?;
        Ok(listed
            .into_iter()
            .filter_map(|c| {
                Some(ContainerSummary {
                    id: c.id?,
                    labels: c.labels.unwrap_or_default(),
                    state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    created: c.created.unwrap_or(0),
                    image_id: c.image_id,
                    ip: super::docker_convert::summary_ip(c.network_settings),
                })
            })
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerInfo>> {
        match self.docker.inspect_container(id, None).await {
            Ok(c) => Ok(Some(info(c))),
            Err(e) => match err(format!("inspect {id}"))(e) {
                e if e.is_not_found() => Ok(None),
                e => Err(e),
            },
        }
    }

    async fn create(&self, name: &str, mut spec: ContainerSpec) -> Result<String> {
        spec.labels
            .insert(labels::MANAGED.to_owned(), self.node.clone());
        let opts = CreateContainerOptionsBuilder::default().name(name).build();
        let created = self
            .docker
            .create_container(Some(opts), body(spec))
            .await
            .map_err(err(format!("create {name}")))?;
        Ok(created.id)
    }

    async fn ensure_network(&self, spec: &NetworkSpec) -> Result<NetworkEnsured> {
        let name = &spec.name;
        let existed = match self.docker.inspect_network(name, None).await {
            Ok(n) if network_matches(&n, spec) => return Ok(NetworkEnsured::Existing),
            Ok(_) => {
                self.docker
                    .remove_network(name)
                    .await
                    .map_err(err(format!("remove network {name}")))?;
                true
            }
            Err(e) => match err(format!("inspect network {name}"))(e) {
                e if e.is_not_found() => false,
                e => return Err(e),
            },
        };
        let labels = HashMap::from([(labels::MANAGED.to_owned(), self.node.clone())]);
        self.docker
            .create_network(network_request(spec, labels))
            .await
            .map_err(err(format!("create network {name}")))?;
        Ok(if existed {
            NetworkEnsured::Replaced
        } else {
            NetworkEnsured::Created
        })
    }

    async fn start(&self, id: &str) -> Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(err(format!("start {id}")))
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let secs = i32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0))
            .unwrap_or(i32::MAX);
        let opts = StopContainerOptionsBuilder::default().t(secs).build();
        match self.docker.stop_container(id, Some(opts)).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 304 | 404,
                ..
            }) => Ok(()),
            Err(e) => Err(err(format!("stop {id}"))(e)),
        }
    }

    async fn remove(&self, id: &str, force: bool) -> Result<()> {
        let opts = RemoveContainerOptionsBuilder::default()
            .force(force)
            .v(true)
            .build();
        self.docker
            .remove_container(id, Some(opts))
            .await
            .map_err(err(format!("remove {id}")))
    }

    async fn update_resources(&self, id: &str, resources: &LinuxResources) -> Result<()> {
        super::docker_resources::update(self, id, resources).await
    }

    async fn memory_usage(&self, id: &str) -> Result<Option<u64>> {
        super::docker_resources::memory_usage(self, id).await
    }

    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent>> {
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
        self.docker
            .events(Some(opts))
            .map_err(|e| err("events")(e))
            .try_filter_map(|e| async move { Ok(event(e)) })
            .boxed()
    }

    async fn exec(&self, id: &str, cmd: &[String], max_output: usize) -> Result<ExecOutput> {
        let options = CreateExecOptions {
            cmd: Some(cmd.to_vec()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(id, options)
            .await
            .map_err(err("create exec"))?;
        let mut output = Vec::new();
        match self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(err("start exec"))?
        {
            StartExecResults::Attached {
                output: mut stream, ..
            } => {
                while let Some(chunk) = stream.next().await {
                    let bytes = chunk.map_err(err("read exec output"))?.into_bytes();
                    let room = max_output.saturating_sub(output.len());
                    output.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
            }
            StartExecResults::Detached => {}
        }
        let inspect = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(err("inspect exec"))?;
        Ok(ExecOutput {
            exit_code: inspect.exit_code,
            output,
        })
    }

    async fn log_tail(&self, id: &str, lines: usize) -> Result<Vec<u8>> {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: lines.to_string(),
            ..LogsOptions::default()
        };
        let mut out = Vec::new();
        let mut logs = self.docker.logs(id, Some(options));
        while let Some(chunk) = logs.next().await {
            out.extend_from_slice(&chunk.map_err(err("read logs"))?.into_bytes());
        }
        Ok(out)
    }

    async fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        match self.docker.inspect_image(image).await {
            Ok(i) => Ok(Some(ImageInfo {
                id: i.id.unwrap_or_default(),
                repo_digests: i.repo_digests.unwrap_or_default(),
                user: i.config.and_then(|c| c.user).unwrap_or_default(),
            })),
            Err(e) => match err(format!("inspect image {image}"))(e) {
                e if e.is_not_found() => Ok(None),
                e => Err(e),
            },
        }
    }

    async fn pull_image(&self, image: &str, auth: Option<RegistryAuth>) -> Result<()> {
        let credentials = auth.map(|a| DockerCredentials {
            username: a.username,
            password: a.password,
            serveraddress: a.server_address,
            identitytoken: a.identity_token,
            ..DockerCredentials::default()
        });
        self.docker
            .create_image(Some(pull_options(image)), None, credentials)
            .try_for_each(|_| async { Ok(()) })
            .await
            .map_err(pull_err(image))
    }

    async fn supports_image_mounts(&self) -> Result<bool> {
        self.image_mounts
            .get_or_try_init(|| async {
                let v = self.docker.version().await.map_err(err("version"))?;
                Ok(v.api_version.as_deref().is_some_and(|api| {
                    let mut parts = api.split('.').map(|p| p.parse::<usize>().unwrap_or(0));
                    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
                    version >= IMAGE_MOUNTS_API
                }))
            })
            .await
            .copied()
    }

    async fn image_layers(&self, image: &str) -> Result<Option<Vec<PathBuf>>> {
        let inspected = self
            .docker
            .inspect_image(image)
            .await
            .map_err(err(format!("inspect image {image}")))?;
        Ok(inspected
            .graph_driver
            .and_then(|g| layer_dirs(&g.name, &g.data)))
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>> {
        let images = self
            .docker
            .list_images(Some(ListImagesOptions::default()))
            .await
            .map_err(err("list images"))?;
        Ok(images
            .into_iter()
            .map(|i| ImageSummary {
                id: i.id,
                repo_tags: i.repo_tags,
                size: i.size,
            })
            .collect())
    }

    async fn remove_image(&self, reference: &str) -> Result<()> {
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            platforms: None,
        };
        self.docker
            .remove_image(reference, Some(options), None)
            .await
            .map(drop)
            .map_err(err(format!("remove image {reference}")))
    }

    async fn read_image_file(&self, image: &str, path: &str, limit: u64) -> Result<Vec<u8>> {
        self.image_file(image, path, limit).await
    }

    async fn image_fs_root(&self) -> Result<Option<PathBuf>> {
        let info = self.docker.info().await.map_err(err("info"))?;
        Ok(info.docker_root_dir.map(PathBuf::from))
    }
}
