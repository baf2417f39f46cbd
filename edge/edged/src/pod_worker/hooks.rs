//! Container lifecycle hooks (kubelet: `handlerRunner` and the hook steps of `startContainer`
//! and `killContainer`): `postStart` right after a container started, `preStop` before it is
//! stopped, each an `exec` in the container, an `httpGet` (run as the probes' are) or a
//! `sleep`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;
use tracing::warn;

use super::Worker;
use crate::events::EventType;
use crate::probe::ProbeTarget;
use verge_container_runtime::ContainerRuntime;

/// The least time a container gets between SIGTERM and SIGKILL after its `preStop` hook
/// (kubelet: `minimumGracePeriodInSeconds`).
pub(super) const MINIMUM_GRACE: Duration = Duration::from_secs(2);

impl<R: ContainerRuntime> Worker<R> {
    /// The spec of container `name` (app or init).
    pub(super) fn spec_container(&self, name: &str) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == name)
    }

    fn hook_target(&self, c: &Container, container_id: &str) -> ProbeTarget {
        ProbeTarget {
            namespace: self.key.namespace.clone(),
            pod: self.key.name.clone(),
            pod_uid: self.uid.clone(),
            container: c.name.clone(),
            container_id: container_id.to_owned(),
            pod_ip: self.pod_ip(),
        }
    }

    /// Runs `c`'s `postStart` hook, if it has one, against the instance `container_id` that
    /// has just started; blocks until the hook ends, as the kubelet does. A failed hook is
    /// recorded as `FailedPostStartHook` (without its message, which may hold secrets) and
    /// the container is killed ([`Worker::kill`]), so that the restart policy and back-off
    /// decide what follows.
    pub(super) async fn post_start(&self, c: &Container, container_id: &str) {
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return;
        };
        let target = self.hook_target(c, container_id);
        let prober = self.ctx.probes.handler();
        let Err(e) = prober.run_hook(&target, c, hook).await else {
            return;
        };
        warn!(container = %c.name, error = %e, "postStart hook failed; killing the container");
        let msg = "PostStartHook failed".to_owned();
        self.container_event(&c.name, EventType::Warning, "FailedPostStartHook", msg);
        self.container_event(
            &c.name,
            EventType::Normal,
            "Killing",
            "FailedPostStartHook".to_owned(),
        );
        if let Err(e) = self.kill(&c.name, container_id, self.grace()).await {
            warn!(container = %c.name, error = %verge_runtime::ErrorChain(&e), "cannot kill the container");
        }
    }

    /// Stops instance `container_id` of container `name` as the kubelet's `killContainer`:
    /// its `preStop` hook first ([`Worker::pre_stop`]), then SIGTERM with the grace period
    /// left, SIGKILL after it.
    ///
    /// # Errors
    /// The runtime cannot stop it.
    pub(super) async fn kill(
        &self,
        name: &str,
        container_id: &str,
        grace: Duration,
    ) -> verge_container_runtime::Result<()> {
        let left = self.pre_stop(name, container_id, grace).await;
        self.ctx.runtime.stop(container_id, left).await
    }

    /// Runs the `preStop` hook of container `name`, if it has one and `grace` is not zero,
    /// against instance `container_id`, for at most `grace`; returns the grace period left
    /// for the stop (`grace` minus the hook's time, at least 2 s after a hook, as the
    /// kubelet's `killContainer`). A failed hook is recorded as `FailedPreStopHook`.
    pub(super) async fn pre_stop(
        &self,
        name: &str,
        container_id: &str,
        grace: Duration,
    ) -> Duration {
        let Some(c) = self.spec_container(name) else {
            return grace;
        };
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else {
            return grace;
        };
        if grace.is_zero() {
            return grace;
        }
        let target = self.hook_target(c, container_id);
        let started = Instant::now();
        let prober = self.ctx.probes.handler();
        match tokio::time::timeout(grace, prober.run_hook(&target, c, hook)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(container = %name, error = %e, "preStop hook failed");
                let msg = "PreStopHook failed".to_owned();
                self.container_event(name, EventType::Warning, "FailedPreStopHook", msg);
            }
            Err(_) => {
                warn!(container = %name, ?grace, "preStop hook not completed in the grace period")
            }
        }
        grace.saturating_sub(started.elapsed()).max(MINIMUM_GRACE)
    }
}
