//! Starting containers (kubelet: `startContainer`): the images of the image volumes it mounts
//! ([`super::image_volumes`]), image per pull policy with the pod's `imagePullSecrets`, env,
//! volume binds and image mounts, create, start. Failures become the kubelet's waiting
//! reasons and are retried with back-off.
//!
//! Under policy `Always`, a pull that cannot reach the registry uses the image present on the
//! node (an edge node whose link is down keeps restarting its containers) with a `Warning`
//! event [`PULL_FAILED_USING_LOCAL`]; see [`verge_container_runtime::image`].

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Secret};
use tokio::time::Instant;
use tracing::{Instrument as _, info, warn};

use super::Worker;
use super::image_volumes::{ImageVolumeFailure, ImageVolumePulls, mounts_image_volume};
use super::observe::Observation;
use super::own_network::Holder;
use super::state::{Waiting, WaitingReason};
use super::sync::{Pass, Role, Wake};
use crate::events::EventType;
use crate::objects::PodObjects as _;
use verge_container_runtime::image::{
    ImageError, ImageOutcome, PullPolicy, credentials_for, ensure_image, node_credentials,
};
use verge_container_runtime::labels::IMAGE_VOLUMES;
use verge_container_runtime::labels::{ContainerLabels, PodRef, SANDBOX_NAME};
use verge_container_runtime::{ContainerRuntime, RuntimeError};

use crate::metrics::{self, Stage};
use crate::network::lock_ips;
use crate::spec;
use crate::volumes::VolumeError;
use crate::{Error, Result};
use crate::{etc_hosts, run_as_non_root, termination_message};
use verge_runtime::ErrorChain;

/// The reason of the `Warning` event of a pull under policy `Always` that could not reach the
/// registry, the image present on the node being used instead (an edge decision; the
/// kubelet fails such a pull).
pub(crate) const PULL_FAILED_USING_LOCAL: &str = "ImagePullFailedUsingLocal";

/// The event of [`ensure_image`]'s answer for `image` (kubelet: the image manager's `Pulled`,
/// `Failed`, `ErrImageNeverPull`; edge: [`PULL_FAILED_USING_LOCAL`]).
pub(super) fn pull_event(
    pulled: &Result<ImageOutcome, ImageError>,
    image: &str,
) -> (EventType, &'static str, String) {
    match pulled {
        Ok(ImageOutcome::Present) => (
            EventType::Normal,
            "Pulled",
            format!("Container image \"{image}\" already present on machine"),
        ),
        Ok(ImageOutcome::Pulled(took)) => (
            EventType::Normal,
            "Pulled",
            format!(
                "Successfully pulled image \"{image}\" in {:?}",
                Duration::from_millis(u64::try_from(took.as_millis()).unwrap_or(u64::MAX))
            ),
        ),
        Ok(ImageOutcome::RegistryUnreachable { error }) => (
            EventType::Warning,
            PULL_FAILED_USING_LOCAL,
            format!(
                "Failed to pull image \"{image}\": the registry is unreachable ({error}); \
                 using the image present on the node"
            ),
        ),
        Err(e @ ImageError::NeverPull { .. }) => (
            EventType::Warning,
            WaitingReason::ErrImageNeverPull.as_str(),
            e.to_string(),
        ),
        Err(ImageError::Inspect { source } | ImageError::Pull { source, .. }) => {
            let msg = format!("Failed to pull image \"{image}\": {}", source.engine());
            (EventType::Warning, "Failed", msg)
        }
    }
}

/// Why a container could not be started (kubelet: `startContainer`'s errors); each maps to
/// the kubelet's waiting reason ([`StartError::reason`]) and message
/// ([`StartError::message`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// The image is not available (`ErrImagePull`, `ErrImageNeverPull`).
    #[error("image not available")]
    Image(#[source] ImageError),
    /// The image of an image volume it mounts is not available (`ErrImagePull`,
    /// `ErrImageNeverPull`).
    #[error("image volume not available")]
    ImageVolume(ImageVolumeFailure),
    /// Env cannot be built (`CreateContainerConfigError`).
    #[error("container configuration failed")]
    Config(#[source] Error),
    /// Volume mounts cannot be built (`CreateContainerConfigError`; an image volume that
    /// cannot be mounted: `CreateContainerError`).
    #[error("volume mounts failed")]
    Mounts(#[source] VolumeError),
    /// The runtime refused to create it (`CreateContainerError`).
    #[error("container creation failed")]
    Create(#[source] RuntimeError),
    /// The runtime could not start it (`RunContainerError`).
    #[error("container start failed")]
    Run(#[source] RuntimeError),
}

impl StartError {
    /// The kubelet's waiting reason.
    pub(super) fn reason(&self) -> WaitingReason {
        match self {
            Self::Image(e) => WaitingReason::of_image(e),
            Self::ImageVolume(f) => f.reason,
            Self::Mounts(VolumeError::ImageMount { .. }) => WaitingReason::CreateContainerError,
            Self::Config(_) | Self::Mounts(_) => WaitingReason::CreateContainerConfigError,
            Self::Create(_) => WaitingReason::CreateContainerError,
            Self::Run(_) => WaitingReason::RunContainerError,
        }
    }

    /// The kubelet's waiting message.
    pub(super) fn message(&self) -> String {
        match self {
            Self::Image(e) => e.to_string(),
            Self::ImageVolume(f) => f.message.clone(),
            Self::Config(e) => e.to_string(),
            Self::Mounts(e) => ErrorChain(e).to_string(),
            Self::Create(e) | Self::Run(e) => ErrorChain(e).to_string(),
        }
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// The pod as the kubelet's `format.Pod` names it in messages: `name_namespace(uid)`.
    pub(super) fn pod_display(&self) -> String {
        format!("{}_{}({})", self.key.name, self.key.namespace, self.uid)
    }

    pub(super) fn pod_ref(&self) -> PodRef {
        PodRef {
            namespace: self.key.namespace.clone(),
            name: self.key.name.clone(),
            uid: self.uid.clone(),
        }
    }

    /// The pod's `imagePullSecrets` that exist.
    pub(super) async fn pull_secrets(&self) -> Vec<Secret> {
        let mut out = Vec::new();
        let refs = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.clone())
            .unwrap_or_default();
        for r in refs {
            match self.ctx.objects.secret(&self.key.namespace, &r.name).await {
                Ok(Some(s)) => out.push(s),
                Ok(None) => warn!(secret = %r.name, "image pull secret not found"),
                Err(e) => {
                    warn!(secret = %r.name, error = %ErrorChain(&e), "image pull secret unavailable")
                }
            }
        }
        out
    }

    /// Starts instance `restart_count` of `c`; on failure records the waiting reason and
    /// schedules the retry (start back-off; `ErrImagePull` turns into `ImagePullBackOff`).
    pub(super) async fn start(
        &mut self,
        c: &Container,
        restart_count: u32,
        role: Role,
        pass: &Pass<'_>,
        wake: &mut Wake,
    ) {
        let pulls = if mounts_image_volume(&self.pod, c) {
            Some(self.image_volume_pulls().await)
        } else {
            None
        };
        let result = self
            .try_start(c, restart_count, role, pass, pulls.as_deref())
            .await;
        let now = Instant::now();
        let ctx = std::sync::Arc::clone(&self.ctx);
        match result {
            Ok(id) => {
                let init = role == Role::Init;
                info!(container = %c.name, restart_count, id = %id, init, "container started");
                self.track(&c.name).started(id, restart_count);
                self.resize_started(c).await;
                // Keep the newest dead instance for `lastState`; older ones go.
                for old in pass.obs.containers.get(&c.name).into_iter().flatten() {
                    if old.labels.restart_count + 1 < restart_count
                        && let Err(e) = ctx.runtime.remove_if_present(&old.id).await
                    {
                        warn!(error = %ErrorChain(&e), "cannot remove old instance");
                    }
                }
            }
            Err(e) => {
                let (reason, message) = (e.reason(), e.message());
                warn!(container = %c.name, %reason, %message, "container not started");
                // kubelet: `Failed` with `Error: <reason>` for image errors, else the detail.
                let detail = if reason.is_image_error() {
                    reason.as_str()
                } else {
                    &message
                };
                let event = format!("Error: {detail}");
                self.container_event(&c.name, EventType::Warning, "Failed", event);
                let retry = self
                    .track(&c.name)
                    .start_failed(Waiting { reason, message }, now);
                wake.at(retry);
            }
        }
    }

    async fn try_start(
        &self,
        c: &Container,
        restart_count: u32,
        role: Role,
        pass: &Pass<'_>,
        pulls: Option<&ImageVolumePulls>,
    ) -> Result<String, StartError> {
        // The container joins the sandbox, or holds the pod's own network (a pod without a
        // sandbox), which an ephemeral container joins.
        let (join, own) = match pass.holder {
            Holder::Sandbox(sandbox) => (Some(sandbox.id.as_str()), None),
            Holder::Own(_) if role == Role::Ephemeral => {
                let Some(holder) = pass.obs.running_holder() else {
                    let msg = "the pod's container is not running".to_owned();
                    return Err(StartError::Config(Error::ContainerConfig(msg)));
                };
                (Some(holder.id.as_str()), None)
            }
            Holder::Own(Some(own)) => (None, Some(own)),
            Holder::Own(None) => {
                let e = Error::NetworkNotReady("the pod network is not ready".to_owned());
                return Err(StartError::Config(e));
            }
        };
        // kubelet: the image volumes fail a start before the container's own image is pulled.
        let images = match pulls {
            Some(pulls) => self.container_images(c, pulls).await?,
            None => super::image_volumes::ContainerImages::default(),
        };
        let image = c.image.clone().unwrap_or_default();
        let image_since = Instant::now();
        let policy = PullPolicy::of(&image, c.image_pull_policy.as_deref());
        let creds = if policy == PullPolicy::Never {
            None
        } else {
            // kubelet: the pod's pull secrets first, then the node's own logins.
            credentials_for(&image, &self.pull_secrets().await)
                .or_else(|| node_credentials(&self.ctx.config.data_dir, &image))
        };
        let pulling = || {
            let msg = format!("Pulling image \"{image}\"");
            self.container_event(&c.name, EventType::Normal, "Pulling", msg);
        };
        let pulled = ensure_image(&self.ctx.runtime, &image, policy, creds, pulling)
            .instrument(verge_telemetry::propagation::in_trace(|| {
                verge_telemetry::span!(
                    "edged.image.ensure",
                    k8s.container.name = %c.name,
                    container.image.name = %image,
                )
            }))
            .await;
        let (type_, reason, msg) = pull_event(&pulled, &image);
        self.container_event(&c.name, type_, reason, msg);
        if pulled.is_ok() {
            metrics::global().pod_start(Stage::Image, image_since.elapsed());
        }
        pulled.map_err(StartError::Image)?;
        let image_user = if run_as_non_root::needs_image_user(&self.pod, c) {
            match self.ctx.runtime.image_status(&image).await {
                Ok(info) => info.map(|i| i.user).unwrap_or_default(),
                Err(e) => {
                    let msg = format!("cannot read the user of image {image}: {}", e.engine());
                    return Err(StartError::Config(Error::ContainerConfig(msg)));
                }
            }
        } else {
            String::new()
        };
        run_as_non_root::verify(&self.pod, c, &image_user, &self.pod_display())
            .map_err(|msg| StartError::Config(Error::ContainerConfig(msg)))?;
        let pod_ip = own.map(|o| o.ip.clone()).or_else(|| self.pod_ip());
        let env = crate::env::resolve_env(
            &self.pod,
            c,
            self.ctx.objects.as_ref(),
            pod_ip.as_deref(),
            self.ctx.node_ip.map(|ip| ip.to_string()).as_deref(),
            &self.ctx.config.node_name,
        )
        .await
        .map_err(StartError::Config)?;
        let mounts = match &self.volumes {
            Some(v) => v.mounts_for(c, &env, &images.sources).await,
            None => Ok(crate::volumes::ContainerMounts::default()),
        };
        let crate::volumes::ContainerMounts {
            mut binds,
            image_mounts,
        } = mounts.map_err(StartError::Mounts)?;
        if etc_hosts::should_mount(&self.pod, c, pod_ip.as_deref()) {
            let pod_dir = self.ctx.config.pods_dir().join(&self.uid);
            let pod = self.pod.clone();
            let domain = self.ctx.config.cluster_domain.clone();
            let written = tokio::task::spawn_blocking(move || {
                etc_hosts::write(&pod_dir, &pod, pod_ip.as_deref(), &domain)
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r)
            .map_err(|e| {
                StartError::Config(Error::ContainerConfig(format!("writing /etc/hosts: {e}")))
            })?;
            binds.push(format!("{}:{}", written.display(), etc_hosts::ETC_HOSTS));
        }
        if let Some(bind) = self.resolv_conf_bind(c).await.map_err(|e| {
            StartError::Config(Error::ContainerConfig(format!(
                "writing /etc/resolv.conf: {e}"
            )))
        })? {
            binds.push(bind);
        }
        if let Some(path) = termination_message::container_path(c) {
            let pod_dir = self.ctx.config.pods_dir().join(&self.uid);
            let host = termination_message::host_path(&pod_dir, &c.name, restart_count);
            let file = host.clone();
            tokio::task::spawn_blocking(move || termination_message::create(&file))
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| {
                    let msg = format!("creating the termination message file: {e}");
                    StartError::Config(Error::ContainerConfig(msg))
                })?;
            binds.push(format!("{}:{path}", host.display()));
        }
        let labels = ContainerLabels {
            pod: self.pod_ref(),
            container: c.name.clone(),
            restart_count,
            sandbox: false,
            pod_ip: own.map(|o| o.ip.clone()),
        };
        let mut spec = spec::container_spec(&self.pod, c, &labels, join, env, binds, self.grace());
        if let Some(own) = own {
            spec = spec::holding_network(spec, &self.pod, &own.network, &own.ip);
        }
        let capacity = self.ctx.memory_capacity;
        spec.oom_score_adj = crate::resources::oom_score_adj(&self.pod, c, capacity);
        spec.image_mounts = image_mounts;
        if !images.ids.is_empty() {
            let ids: Vec<String> = images.ids.into_iter().collect();
            spec.labels.insert(IMAGE_VOLUMES.to_owned(), ids.join(","));
        }
        let name = labels.docker_name();
        let creating_since = Instant::now();
        let id = self
            .create_replacing(&name, spec)
            .instrument(verge_telemetry::propagation::in_trace(|| {
                verge_telemetry::span!(
                    "edged.container.create",
                    k8s.container.name = %c.name,
                    verge.restart_count = restart_count,
                )
            }))
            .await
            .map_err(StartError::Create)?;
        let msg = format!("Created container {}", c.name);
        self.container_event(&c.name, EventType::Normal, "Created", msg);
        let started = self
            .ctx
            .runtime
            .start(&id)
            .instrument(verge_telemetry::propagation::in_trace(|| {
                verge_telemetry::span!(
                    "edged.container.start",
                    k8s.container.name = %c.name,
                    container.id = %id,
                )
            }))
            .await;
        if let Err(e) = started {
            let _ = self.ctx.runtime.remove_if_present(&id).await;
            self.start_refused(own.map(|o| o.ip.as_str()), &e);
            return Err(StartError::Run(e));
        }
        metrics::global().pod_start(Stage::Container, creating_since.elapsed());
        if own.is_some() {
            self.hairpin();
        }
        let msg = format!("Started container {}", c.name);
        self.container_event(&c.name, EventType::Normal, "Started", msg);
        // A failed postStart hook kills the container; its exit then goes through the
        // restart policy and back-off like any other.
        self.post_start(c, &id).await;
        Ok(id)
    }

    /// Creates and starts sandbox `attempt` from `pod_infra_image` (pulled if not present).
    pub(super) async fn start_sandbox(&self, attempt: u32) -> Result<String> {
        let cfg = &self.ctx.config;
        let infra = &cfg.edged.pod_sandbox_image;
        if let Err(e) = ensure_image(
            &self.ctx.runtime,
            infra,
            PullPolicy::IfNotPresent,
            None,
            || {},
        )
        .instrument(verge_telemetry::propagation::in_trace(|| {
            verge_telemetry::span!(
                "edged.image.ensure",
                k8s.container.name = SANDBOX_NAME,
                container.image.name = %infra,
            )
        }))
        .await
        {
            return Err(Error::ContainerConfig(format!("sandbox image: {e}")));
        }
        let mut labels = ContainerLabels {
            pod: self.pod_ref(),
            container: SANDBOX_NAME.into(),
            restart_count: attempt,
            sandbox: true,
            pod_ip: None,
        };
        let (network, on_pod_network) = if spec::host_network(&self.pod) {
            (verge_container_runtime::types::NetworkMode::Host, None)
        } else {
            let state = self.ctx.network.borrow().clone();
            let mode = state.sandbox_network().map_err(Error::NetworkNotReady)?;
            let net = match state {
                crate::network::NetworkState::Ready(net) => Some(net),
                _ => None,
            };
            (mode, net)
        };
        // On the pod network the pod's address is edged's, kept if the sandbox is re-created
        // ([`verge_edge_net::ipam`]).
        let ip = match &on_pod_network {
            Some(net) => {
                let ip = lock_ips(&self.ctx.pod_ips)
                    .assign(&self.uid, net.cidr())
                    .map_err(|e| Error::ContainerConfig(e.to_string()))?;
                labels.pod_ip = Some(ip.to_string());
                Some(ip.to_string())
            }
            None => None,
        };
        let mut spec = spec::sandbox_spec(
            &self.pod,
            &labels,
            network,
            &cfg.edged.pod_sandbox_image,
            &cfg.edged.pod_sandbox_command,
            self.grace(),
        );
        spec.ipv4_address = ip;
        let name = labels.docker_name();
        let id = self.create_replacing(&name, spec).await?;
        if let Err(e) = self.ctx.runtime.start(&id).await {
            let _ = self.ctx.runtime.remove_if_present(&id).await;
            self.start_refused(labels.pod_ip.as_deref(), &e);
            return Err(e.into());
        }
        if on_pod_network.is_some() {
            self.hairpin();
        }
        // Its IP is read by the sync's next observation.
        Ok(id)
    }

    /// Turns hairpin mode on for the new port of the pod network's bridge: a pod may reach
    /// itself through its Service.
    fn hairpin(&self) {
        if let crate::network::NetworkState::Ready(net) = &*self.ctx.network.borrow()
            && let Err(e) = net.enable_hairpin()
        {
            warn!(error = %e, bridge = %net.spec().bridge, "hairpin mode not set");
        }
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// The bind of the pod's resolv.conf (`resolv_conf`) into container `c`, written to
    /// `<pod dir>/resolv.conf`: when the node has its cluster resolver (the pod network's
    /// gateway) or the pod sets `dnsPolicy: None`; otherwise Docker's own file stays. `None`
    /// as well when the container mounts a volume at `/etc/resolv.conf` itself.
    async fn resolv_conf_bind(&self, c: &Container) -> std::io::Result<Option<String>> {
        use crate::resolv_conf::{self, RESOLV_CONF};
        if c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == RESOLV_CONF)
        {
            return Ok(None);
        }
        let cluster = match &*self.ctx.network.borrow() {
            crate::network::NetworkState::Ready(net) => net.spec().gateway.parse().ok(),
            _ => None,
        };
        let policy = self.pod.spec.as_ref().and_then(|s| s.dns_policy.as_deref());
        if cluster.is_none() && policy != Some("None") {
            return Ok(None);
        }
        let pod = std::sync::Arc::clone(&self.pod);
        let pod_dir = self.ctx.config.pods_dir().join(&self.uid);
        let domain = self.ctx.config.cluster_domain.clone();
        let path = tokio::task::spawn_blocking(move || -> std::io::Result<std::path::PathBuf> {
            // The node's upstreams (systemd-resolved's file on such hosts: its stub
            // 127.0.0.53 is unreachable from pods).
            let conf =
                resolv_conf::for_pod(&pod, &verge_edge_net::resolv::node(), cluster, &domain);
            std::fs::create_dir_all(&pod_dir)?;
            let path = pod_dir.join("resolv.conf");
            std::fs::write(&path, conf.render())?;
            Ok(path)
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Some(format!("{}:{RESOLV_CONF}", path.display())))
    }

    /// Creates container `name`; a leftover of that name (an attempt interrupted between
    /// create and start, or by a crash) is removed and the create tried once more. Names are
    /// unique per pod uid, container and attempt, so a leftover is never another pod's; not
    /// looking first saves a Docker call on every start.
    async fn create_replacing(
        &self,
        name: &str,
        spec: verge_container_runtime::ContainerSpec,
    ) -> std::result::Result<String, RuntimeError> {
        match self.ctx.runtime.create(name, spec.clone()).await {
            Err(e) if e.is_conflict() => {
                info!(container = %name, "removing a leftover container of the same name");
                self.ctx.runtime.remove_if_present(name).await?;
                self.ctx.runtime.create(name, spec).await
            }
            created => created,
        }
    }

    /// Creates and starts a new sandbox; earlier sandboxes and all containers (whose network
    /// namespace is gone) are removed first, so init containers run again (kubelet).
    pub(super) async fn create_sandbox(&mut self, obs: &Observation) -> Result<()> {
        for i in obs.all() {
            if !i.labels.sandbox {
                self.track(&i.labels.container)
                    .saw_instance(i.labels.restart_count);
            }
            self.ctx.runtime.remove_if_present(&i.id).await?;
        }
        let attempt = obs
            .sandboxes
            .first()
            .map_or(0, |s| s.labels.restart_count + 1);
        let since = Instant::now();
        let id = self.start_sandbox(attempt).await?;
        metrics::global().pod_start(Stage::Sandbox, since.elapsed());
        info!(sandbox = %id, attempt, "sandbox started");
        Ok(())
    }
}
