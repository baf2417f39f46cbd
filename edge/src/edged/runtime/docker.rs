//! [`DockerRuntime`]: [`ContainerRuntime`] over the Docker engine API through bollard. This
//! is the only module of edged that speaks bollard.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, EventMessage,
    HostConfig,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, EventsOptionsBuilder,
    ListContainersOptionsBuilder, ListImagesOptions, LogsOptions, RemoveContainerOptionsBuilder,
    RemoveImageOptions, StopContainerOptionsBuilder,
};
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::types::{
    ContainerInfo, ContainerSpec, ContainerSummary, ExecOutput, ImageInfo, ImageSummary, IpcMode,
    ListFilter, NetworkMode, RegistryAuth, RunState, RuntimeEvent, Scope,
};
use super::{ContainerRuntime, Result, RuntimeError, labels};

/// Seconds bollard waits for one API call (stops wait up to the grace period on top).
const CALL_TIMEOUT_SECS: u64 = 120;

/// The Docker engine, scoped to one node; cheap to clone. See [`ContainerRuntime`].
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    node: String,
}

/// Wraps a bollard error with the call that failed, by HTTP status (404, 409, other).
fn err(op: impl Into<String>) -> impl FnOnce(DockerError) -> RuntimeError {
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
        let docker = match endpoint {
            None => Docker::connect_with_local_defaults(),
            Some(host) => Docker::connect_with_host(host),
        }
        .map_err(err("connect"))?
        .with_timeout(Duration::from_secs(CALL_TIMEOUT_SECS));
        let docker = docker
            .negotiate_version()
            .await
            .map_err(err("negotiate API version"))?;
        Ok(Self {
            docker,
            node: node.to_owned(),
        })
    }

    /// The local socket for node `node`, without reaching the engine yet (nothing is sent
    /// until the first call) and without version negotiation.
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the local defaults are unusable.
    pub fn local(node: &str) -> Result<Self> {
        let docker = Docker::connect_with_local_defaults()
            .map_err(err("connect"))?
            .with_timeout(Duration::from_secs(CALL_TIMEOUT_SECS));
        Ok(Self {
            docker,
            node: node.to_owned(),
        })
    }

    /// The `label=value` filter that selects this node's containers.
    fn managed_filter(&self) -> String {
        format!("{}={}", labels::MANAGED, self.node)
    }
}

/// Docker's "zero time" (`0001-01-01T00:00:00Z`) and garbage are `None`.
fn parse_time(s: Option<&str>) -> Option<Time> {
    let t: Timestamp = s?.parse().ok()?;
    (t.as_second() > 0).then_some(Time(t))
}

/// An inspect as [`ContainerInfo`].
fn info(c: ContainerInspectResponse) -> ContainerInfo {
    let config = c.config.unwrap_or_default();
    let st = c.state.unwrap_or_default();
    let state = match st.status {
        Some(
            ContainerStateStatusEnum::RUNNING
            | ContainerStateStatusEnum::PAUSED
            | ContainerStateStatusEnum::RESTARTING,
        ) => RunState::Running,
        Some(ContainerStateStatusEnum::CREATED) => RunState::Created,
        _ if st.running == Some(true) => RunState::Running,
        _ => RunState::Exited,
    };
    let ip = c
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|n| n.get("bridge").and_then(|b| b.ip_address.clone()))
        .filter(|ip| !ip.is_empty());
    ContainerInfo {
        id: c.id.unwrap_or_default(),
        labels: config.labels.unwrap_or_default(),
        state,
        exit_code: st
            .exit_code
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(0),
        oom_killed: st.oom_killed.unwrap_or(false),
        error: st.error.filter(|e| !e.is_empty()),
        started_at: parse_time(st.started_at.as_deref()),
        finished_at: parse_time(st.finished_at.as_deref()),
        image: config.image.unwrap_or_default(),
        image_id: c.image.unwrap_or_default(),
        ip,
    }
}

/// A [`ContainerSpec`] as Docker's create body.
fn body(spec: ContainerSpec) -> ContainerCreateBody {
    let mode = |m: String| Some(m);
    let network_mode = match spec.network {
        NetworkMode::Bridge => mode("bridge".to_owned()),
        NetworkMode::Host => mode("host".to_owned()),
        NetworkMode::Container(id) => mode(format!("container:{id}")),
    };
    let ipc_mode = match spec.ipc {
        IpcMode::Default => None,
        IpcMode::Shareable => mode("shareable".to_owned()),
        IpcMode::Container(id) => mode(format!("container:{id}")),
    };
    let port_bindings: HashMap<String, Option<Vec<bollard::models::PortBinding>>> = spec
        .port_bindings
        .into_iter()
        .map(|(port, bindings)| {
            let bindings = bindings
                .into_iter()
                .map(|b| bollard::models::PortBinding {
                    host_ip: b.host_ip,
                    host_port: Some(b.host_port),
                })
                .collect();
            (port, Some(bindings))
        })
        .collect();
    let host = HostConfig {
        binds: Some(spec.binds).filter(|b| !b.is_empty()),
        network_mode,
        ipc_mode,
        port_bindings: Some(port_bindings).filter(|b| !b.is_empty()),
        privileged: spec.privileged,
        readonly_rootfs: spec.readonly_rootfs,
        cap_add: spec.cap_add,
        cap_drop: spec.cap_drop,
        group_add: spec.group_add,
        security_opt: spec.security_opt,
        sysctls: spec.sysctls,
        nano_cpus: spec.nano_cpus,
        memory: spec.memory,
        cpu_shares: spec.cpu_shares,
        ..HostConfig::default()
    };
    ContainerCreateBody {
        image: Some(spec.image),
        entrypoint: spec.entrypoint,
        cmd: spec.cmd,
        env: spec.env,
        working_dir: spec.working_dir,
        user: spec.user,
        tty: spec.tty,
        open_stdin: spec.open_stdin,
        stdin_once: spec.stdin_once,
        hostname: spec.hostname,
        labels: Some(spec.labels),
        exposed_ports: Some(spec.exposed_ports).filter(|e| !e.is_empty()),
        host_config: Some(host),
        ..ContainerCreateBody::default()
    }
}

/// A Docker event as a [`RuntimeEvent`]; `None` for other actions.
fn event(e: EventMessage) -> Option<RuntimeEvent> {
    let id = e.actor.and_then(|a| a.id).unwrap_or_default();
    match e.action.as_deref()? {
        "start" => Some(RuntimeEvent::Start(id)),
        "die" => Some(RuntimeEvent::Die(id)),
        "oom" => Some(RuntimeEvent::Oom(id)),
        "destroy" => Some(RuntimeEvent::Destroy(id)),
        _ => None,
    }
}

/// `repo[:tag][@digest]` as bollard's create-image options.
fn pull_options(image: &str) -> bollard::query_parameters::CreateImageOptions {
    let builder = CreateImageOptionsBuilder::default();
    match super::image::split_reference(image) {
        (_, super::image::Reference::Digest(_)) => builder.from_image(image),
        (repo, super::image::Reference::Tag(t)) => builder.from_image(repo).tag(t),
        (repo, super::image::Reference::None) => builder.from_image(repo).tag("latest"),
    }
    .build()
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
            .map_err(err(format!("pull {image}")))
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

    async fn image_fs_root(&self) -> Result<Option<PathBuf>> {
        let info = self.docker.info().await.map_err(err("info"))?;
        Ok(info.docker_root_dir.map(PathBuf::from))
    }
}
