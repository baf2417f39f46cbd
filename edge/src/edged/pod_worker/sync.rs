//! One sync of a pod (kubelet: `SyncPod` / `computePodActions`): make sure the sandbox runs
//! and the volumes exist, run the init containers in order, then keep the app containers as
//! the restart policy says, with crash-loop back-off.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;
use tracing::{info, warn};

use super::Worker;
use super::observe::{Instance, Observation, RunState, observe};
use super::state::{PodState, Waiting};
use crate::Result;
use crate::edged::events::EventType;
use crate::edged::probe::ProbeTarget;
use crate::edged::runtime::ContainerRuntime;
use verge_runtime::ErrorChain;

/// The earliest moment the worker must sync again.
#[derive(Debug, Default)]
pub(super) struct Wake(pub Option<Instant>);

impl Wake {
    pub(super) fn at(&mut self, t: Instant) {
        self.0 = Some(self.0.map_or(t, |w| w.min(t)));
    }
}

/// Where one container stands after its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Running.
    Running,
    /// Being started, backing off, or being killed.
    Pending,
    /// Exited and not restarted; `ok` = exit code 0.
    Exited { ok: bool },
}

/// Whether a container that exited with `code` restarts under restartPolicy `policy`.
fn restarts(policy: &str, code: i32, init: bool) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => code != 0,
        // Init containers are never restarted after success.
        _ => !init || code != 0,
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Syncs the pod once; returns when it must run again at the latest.
    pub(super) async fn sync(&mut self) -> Result<Option<Instant>> {
        if (self.deleted || self.pod.metadata.deletion_timestamp.is_some())
            && !self.state.is_terminating()
        {
            let grace = self.grace();
            info!(?grace, "terminating pod");
            self.state = std::mem::replace(&mut self.state, PodState::Pending).delete(grace);
        }
        if let PodState::Terminating { grace } = self.state {
            self.terminate(grace).await?;
            return Ok(None);
        }
        let mut wake = Wake::default();
        let mut obs = self.observe().await?;
        if !matches!(self.state, PodState::Completed { .. }) && self.step(&obs, &mut wake).await? {
            obs = self.observe().await?;
        }
        self.report(&obs).await;
        Ok(wake.0)
    }

    /// What Docker holds for the pod; remembers the running sandbox's IP.
    async fn observe(&mut self) -> Result<Observation> {
        let obs = observe(&self.ctx.runtime, &self.uid).await?;
        if let Some(ip) = obs.sandbox().and_then(|s| s.ip.clone()) {
            self.sandbox_ip = Some(ip);
        }
        Ok(obs)
    }

    /// Takes the next lifecycle step; returns whether Docker changed.
    async fn step(&mut self, obs: &Observation, wake: &mut Wake) -> Result<bool> {
        let Some(sandbox) = obs.sandbox().cloned() else {
            self.state = PodState::Pending;
            if !obs.sandboxes.is_empty() {
                let msg = "Pod sandbox changed, it will be killed and re-created.".to_owned();
                self.pod_event(EventType::Normal, "SandboxChanged", msg);
            }
            if let Err(e) = self.create_sandbox(obs).await {
                let msg = format!("Failed to create pod sandbox: {}", ErrorChain(&e));
                self.pod_event(EventType::Warning, "FailedCreatePodSandBox", msg);
                return Err(e);
            }
            wake.at(Instant::now());
            return Ok(true);
        };
        if !self.ensure_volumes(wake).await {
            return Ok(false);
        }
        let mut changed = false;
        let spec = self.pod.spec.clone().unwrap_or_default();
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".to_owned());
        let initialized = spec
            .containers
            .iter()
            .any(|c| obs.latest(&c.name).is_some());
        if !initialized {
            for c in spec.init_containers.iter().flatten() {
                match self
                    .container_step(c, obs, &sandbox, &policy, true, wake, &mut changed)
                    .await?
                {
                    Step::Exited { ok: true } => continue,
                    Step::Exited { ok: false } => {
                        warn!(container = %c.name, "init container failed; pod failed");
                        self.complete(false, &sandbox).await;
                        return Ok(true);
                    }
                    Step::Running | Step::Pending => {
                        self.state = PodState::Initializing;
                        return Ok(changed);
                    }
                }
            }
        }
        self.state = PodState::Running;
        let (mut active, mut all_ok) = (false, true);
        for c in &spec.containers {
            match self
                .container_step(c, obs, &sandbox, &policy, false, wake, &mut changed)
                .await?
            {
                Step::Running | Step::Pending => active = true,
                Step::Exited { ok } => all_ok &= ok,
            }
        }
        if !active {
            self.complete(all_ok, &sandbox).await;
            changed = true;
        }
        Ok(changed)
    }

    /// Every container is done for good: stop the sandbox, phase Succeeded/Failed.
    async fn complete(&mut self, succeeded: bool, sandbox: &Instance) {
        info!(succeeded, "pod completed");
        self.state = PodState::Completed { succeeded };
        if let Err(e) = self.ctx.runtime.stop(&sandbox.id, Duration::ZERO).await {
            warn!(error = %ErrorChain(&e), "cannot stop sandbox");
        }
    }

    /// One container's step: adopt, kill (probe failure), restart with back-off, or start.
    #[allow(clippy::too_many_arguments)]
    async fn container_step(
        &mut self,
        c: &Container,
        obs: &Observation,
        sandbox: &Instance,
        policy: &str,
        init: bool,
        wake: &mut Wake,
        changed: &mut bool,
    ) -> Result<Step> {
        let now = Instant::now();
        let latest = obs.latest(&c.name).cloned();
        match latest {
            Some(i) if i.state == RunState::Running => {
                let t = self.track(&c.name);
                t.waiting = None;
                if let Some((_, probe)) = t.kill.take_if(|(id, _)| *id == i.id) {
                    info!(container = %c.name, %probe, "probe failed; killing container");
                    self.killing_event(&c.name, Some(probe));
                    self.ctx.probes.remove_container(&self.uid, &c.name);
                    self.ctx.runtime.stop(&i.id, self.grace()).await?;
                    *changed = true;
                    wake.at(now);
                    return Ok(Step::Pending);
                }
                if !init && t.probed.as_deref() != Some(i.id.as_str()) {
                    t.probed = Some(i.id.clone());
                    let target = ProbeTarget {
                        pod_uid: self.uid.clone(),
                        container: c.name.clone(),
                        container_id: i.id.clone(),
                        pod_ip: self.pod_ip(),
                    };
                    self.ctx.probes.add(target, c);
                }
                Ok(Step::Running)
            }
            Some(i) if i.state == RunState::Created => {
                // An interrupted start: finish it.
                if let Err(e) = self.ctx.runtime.start(&i.id).await {
                    warn!(error = %ErrorChain(&e), "cannot start created container; recreating");
                    self.ctx.runtime.remove_if_present(&i.id).await?;
                }
                *changed = true;
                Ok(Step::Pending)
            }
            Some(i) => {
                let (ctx, uid) = (std::sync::Arc::clone(&self.ctx), self.uid.clone());
                let pod_name = format!("{}_{}({uid})", self.key.name, self.key.namespace);
                let t = self.track(&c.name);
                if t.probed.as_deref() == Some(i.id.as_str()) {
                    t.probed = None;
                    ctx.probes.remove_container(&uid, &c.name);
                }
                if !restarts(policy, i.exit_code, init) {
                    t.waiting = None;
                    return Ok(Step::Exited {
                        ok: i.exit_code == 0,
                    });
                }
                if t.handled_exit.as_deref() != Some(i.id.as_str()) {
                    let delay = t.crash.next_delay(i.ran_for());
                    let since = i.finished_at.as_ref().map_or(Duration::ZERO, |f| {
                        let now = crate::node::status::now();
                        Duration::try_from(now.duration_since(f.0)).unwrap_or(Duration::ZERO)
                    });
                    t.retry_at = Some(now + delay.saturating_sub(since));
                    t.handled_exit = Some(i.id.clone());
                    t.next_restart = t.next_restart.max(i.labels.restart_count + 1);
                }
                if !t.may_start(now) {
                    let retry_at = t.retry_at.unwrap_or(now);
                    t.waiting = Some(Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: format!(
                            "back-off {}s restarting failed container={} pod={pod_name}",
                            t.crash.last().as_secs(),
                            c.name,
                        ),
                    });
                    wake.at(retry_at);
                    let msg = format!(
                        "Back-off restarting failed container {} in pod {pod_name}",
                        c.name
                    );
                    self.container_event(&c.name, EventType::Warning, "BackOff", msg);
                    return Ok(Step::Pending);
                }
                let count = t.next_restart;
                self.start(c, count, sandbox, init, obs, wake).await;
                *changed = true;
                Ok(Step::Pending)
            }
            None => {
                let t = self.track(&c.name);
                if !t.may_start(now) {
                    if let Some(w) = t.waiting.as_mut().filter(|w| w.reason == "ErrImagePull") {
                        w.reason = "ImagePullBackOff".into();
                    }
                    let pull_backoff = t
                        .waiting
                        .as_ref()
                        .is_some_and(|w| w.reason == "ImagePullBackOff");
                    wake.at(t.retry_at.unwrap_or(now));
                    if pull_backoff {
                        let image = c.image.as_deref().unwrap_or_default();
                        let msg = format!("Back-off pulling image \"{image}\"");
                        self.container_event(&c.name, EventType::Normal, "BackOff", msg);
                        let msg = "Error: ImagePullBackOff".to_owned();
                        self.container_event(&c.name, EventType::Warning, "Failed", msg);
                    }
                    return Ok(Step::Pending);
                }
                let count = t.next_restart;
                self.start(c, count, sandbox, init, obs, wake).await;
                *changed = true;
                Ok(Step::Pending)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policy() {
        assert!(restarts("Always", 0, false));
        assert!(!restarts("Always", 0, true));
        assert!(restarts("Always", 1, true));
        assert!(restarts("OnFailure", 2, false));
        assert!(!restarts("OnFailure", 0, false));
        assert!(!restarts("Never", 1, false));
    }
}
