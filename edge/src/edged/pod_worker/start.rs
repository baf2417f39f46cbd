//! Starting containers (kubelet: `startContainer`): image per pull policy with the pod's
//! `imagePullSecrets`, env, volume binds, create, start. Failures become the kubelet's
//! waiting reasons and are retried with back-off.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Secret};
use tokio::time::Instant;
use tracing::{info, warn};

use super::Worker;
use super::observe::{Instance, Observation};
use super::state::Waiting;
use super::sync::Wake;
use crate::edged::events::EventType;
use crate::edged::objects::PodObjects as _;
use crate::edged::runtime::ContainerRuntime;
use crate::edged::runtime::image::{
    ImageError, ImageOutcome, PullPolicy, credentials_for, ensure_image,
};
use crate::edged::runtime::labels::{ContainerLabels, PodRef, SANDBOX_NAME};
use crate::edged::runtime::spec;
use crate::{Error, Result};
use verge_runtime::ErrorChain;

/// A failed start: the kubelet's waiting reason and a message.
type Failure = (&'static str, String);

impl<R: ContainerRuntime> Worker<R> {
    pub(super) fn pod_ref(&self) -> PodRef {
        PodRef {
            namespace: self.key.namespace.clone(),
            name: self.key.name.clone(),
            uid: self.uid.clone(),
        }
    }

    /// The pod's `imagePullSecrets` that exist.
    async fn pull_secrets(&self) -> Vec<Secret> {
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
        sandbox: &Instance,
        init: bool,
        obs: &Observation,
        wake: &mut Wake,
    ) {
        let result = self.try_start(c, restart_count, sandbox).await;
        let now = Instant::now();
        let (initial, max) = (
            self.ctx.config.crash_loop_backoff_initial,
            self.ctx.config.crash_loop_backoff_max,
        );
        let ctx = std::sync::Arc::clone(&self.ctx);
        match result {
            Ok(id) => {
                info!(container = %c.name, restart_count, id = %id, init, "container started");
                let t = self.track(&c.name);
                t.waiting = None;
                t.retry_at = None;
                t.next_restart = restart_count;
                t.start = super::backoff::Backoff::new(initial, max);
                // Keep the newest dead instance for `lastState`; older ones go.
                for old in obs.containers.get(&c.name).into_iter().flatten() {
                    if old.labels.restart_count + 1 < restart_count
                        && let Err(e) = ctx.runtime.remove_if_present(&old.id).await
                    {
                        warn!(error = %ErrorChain(&e), "cannot remove old instance");
                    }
                }
            }
            Err((reason, message)) => {
                warn!(container = %c.name, reason, %message, "container not started");
                // kubelet: `Failed` with `Error: <reason>` for image errors, else the detail.
                let detail = if reason.starts_with("ErrImage") {
                    reason
                } else {
                    &message
                };
                let event = format!("Error: {detail}");
                self.container_event(&c.name, EventType::Warning, "Failed", event);
                let t = self.track(&c.name);
                let delay = t.start.next_delay(None).max(initial);
                t.retry_at = Some(now + delay);
                t.waiting = Some(Waiting {
                    reason: reason.to_owned(),
                    message,
                });
                // Show ErrImagePull first, then ImagePullBackOff while waiting.
                wake.at(if reason == "ErrImagePull" {
                    now + Duration::from_secs(1)
                } else {
                    now + delay
                });
            }
        }
    }

    async fn try_start(
        &self,
        c: &Container,
        restart_count: u32,
        sandbox: &Instance,
    ) -> Result<String, Failure> {
        let image = c.image.clone().unwrap_or_default();
        let policy = PullPolicy::of(&image, c.image_pull_policy.as_deref());
        let creds = if policy == PullPolicy::Never {
            None
        } else {
            credentials_for(&image, &self.pull_secrets().await)
        };
        let pulling = || {
            let msg = format!("Pulling image \"{image}\"");
            self.container_event(&c.name, EventType::Normal, "Pulling", msg);
        };
        let pulled = ensure_image(&self.ctx.runtime, &image, policy, creds, pulling).await;
        let (type_, reason, msg) = match &pulled {
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
            Err(e @ ImageError::NeverPull { .. }) => {
                (EventType::Warning, "ErrImageNeverPull", e.to_string())
            }
            Err(ImageError::Inspect { source } | ImageError::Pull { source, .. }) => {
                let msg = format!("Failed to pull image \"{image}\": {}", source.engine());
                (EventType::Warning, "Failed", msg)
            }
        };
        self.container_event(&c.name, type_, reason, msg);
        pulled.map_err(|e| {
            let reason = match e {
                ImageError::NeverPull { .. } => "ErrImageNeverPull",
                _ => "ErrImagePull",
            };
            (reason, e.to_string())
        })?;
        let config_err = |e: Error| ("CreateContainerConfigError", e.to_string());
        let env = crate::edged::env::resolve_env(
            &self.pod,
            c,
            self.ctx.objects.as_ref(),
            self.pod_ip().as_deref(),
            &self.ctx.config.node_name,
        )
        .await
        .map_err(config_err)?;
        let binds = match &self.volumes {
            Some(v) => v.binds_for(c, &env).map_err(config_err)?,
            None => Vec::new(),
        };
        let labels = ContainerLabels {
            pod: self.pod_ref(),
            container: c.name.clone(),
            restart_count,
            sandbox: false,
        };
        let spec =
            spec::container_spec(&self.pod, c, &labels, &sandbox.id, env, binds, self.grace());
        let name = labels.docker_name();
        // A leftover with the same name (interrupted earlier attempt) would conflict.
        let _ = self.ctx.runtime.remove_if_present(&name).await;
        let id = self
            .ctx
            .runtime
            .create(&name, spec)
            .await
            .map_err(|e| ("CreateContainerError", chain(&e)))?;
        let msg = format!("Created container {}", c.name);
        self.container_event(&c.name, EventType::Normal, "Created", msg);
        if let Err(e) = self.ctx.runtime.start(&id).await {
            let _ = self.ctx.runtime.remove_if_present(&id).await;
            return Err(("RunContainerError", chain(&e)));
        }
        let msg = format!("Started container {}", c.name);
        self.container_event(&c.name, EventType::Normal, "Started", msg);
        Ok(id)
    }

    /// Creates and starts sandbox `attempt` from `pod_infra_image` (pulled if not present).
    pub(super) async fn start_sandbox(&self, attempt: u32) -> Result<String> {
        let cfg = &self.ctx.config;
        let infra = &cfg.pod_infra_image;
        if let Err(e) = ensure_image(
            &self.ctx.runtime,
            infra,
            PullPolicy::IfNotPresent,
            None,
            || {},
        )
        .await
        {
            return Err(Error::ContainerConfig(format!("sandbox image: {e}")));
        }
        let labels = ContainerLabels {
            pod: self.pod_ref(),
            container: SANDBOX_NAME.into(),
            restart_count: attempt,
            sandbox: true,
        };
        let spec = spec::sandbox_spec(
            &self.pod,
            &labels,
            &cfg.pod_infra_image,
            &cfg.pod_infra_command,
            self.grace(),
        );
        let name = labels.docker_name();
        let _ = self.ctx.runtime.remove_if_present(&name).await;
        let id = self.ctx.runtime.create(&name, spec).await?;
        if let Err(e) = self.ctx.runtime.start(&id).await {
            let _ = self.ctx.runtime.remove_if_present(&id).await;
            return Err(e.into());
        }
        // Its IP is read by the sync's next observation.
        Ok(id)
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Creates and starts a new sandbox; earlier sandboxes and all containers (whose network
    /// namespace is gone) are removed first, so init containers run again (kubelet).
    pub(super) async fn create_sandbox(&mut self, obs: &Observation) -> Result<()> {
        for i in obs.all() {
            if !i.labels.sandbox {
                let t = self.track(&i.labels.container);
                t.next_restart = t.next_restart.max(i.labels.restart_count + 1);
            }
            self.ctx.runtime.remove_if_present(&i.id).await?;
        }
        let attempt = obs
            .sandboxes
            .first()
            .map_or(0, |s| s.labels.restart_count + 1);
        let id = self.start_sandbox(attempt).await?;
        info!(sandbox = %id, attempt, "sandbox started");
        Ok(())
    }
}

/// An error with its causes, for messages.
fn chain(e: &crate::edged::runtime::RuntimeError) -> String {
    ErrorChain(e).to_string()
}
