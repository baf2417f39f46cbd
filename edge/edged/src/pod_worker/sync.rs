//! One sync of a pod (kubelet: `SyncPod` / `computePodActions`): make sure the sandbox runs
//! and the volumes exist, run the init containers in order, then keep the app containers as
//! the restart policy says, with crash-loop back-off. The decisions are the transitions of
//! [`PodState`] and [`ContainerTrack`](super::state::ContainerTrack); this file carries them
//! out against the runtime.

use std::sync::Arc;
use std::time::Duration;

use futures::future::OptionFuture;
use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;
use tracing::{Instrument as _, info, warn};

use super::observe::{Instance, Observation, RunState, observe};
use super::own_network::Holder;
use super::state::{ExitDecision, PodEvent, PodState, RestartPolicy, WaitingReason, is_sidecar};
use super::{Worker, spec_of};
use crate::events::EventType;
use crate::probe::ProbeTarget;
use crate::{Error, Result};
use verge_container_runtime::ContainerRuntime;
use verge_runtime::ErrorChain;

/// How soon a pod whose sandbox waits for the pod network looks again.
const NETWORK_RETRY: Duration = Duration::from_secs(2);

/// The earliest moment the worker must sync again.
#[derive(Debug, Default)]
pub(super) struct Wake(pub Option<Instant>);

impl Wake {
    pub(super) fn at(&mut self, t: Instant) {
        self.0 = Some(self.0.map_or(t, |w| w.min(t)));
    }
}

/// What one sync works from: what Docker holds, what the containers join, the restart
/// policy.
pub(super) struct Pass<'a> {
    /// What Docker holds for the pod.
    pub obs: &'a Observation,
    /// The running sandbox, or the pod's own network (a pod without a sandbox).
    pub holder: &'a Holder,
    /// `spec.restartPolicy`.
    pub policy: RestartPolicy,
}

/// Whether a container is an init container (run to completion, in order, before the app
/// containers; never probed), a sidecar or an app container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// `spec.initContainers[]`.
    Init,
    /// `spec.initContainers[]` with `restartPolicy: Always` (a restartable init container):
    /// started in order with the init containers, the next one waiting until it has started
    /// (startup probe passed, or running without one); then kept running beside the app
    /// containers, probed like them and restarted whenever it exits, whatever the pod's
    /// restart policy; stopped when the app containers are done for good.
    Sidecar,
    /// `spec.containers[]`.
    App,
    /// `spec.ephemeralContainers[]` (`kubectl debug`): started once in a running pod, never
    /// restarted or probed, not part of the pod's completion.
    Ephemeral,
}

impl Role {
    fn of_init(c: &Container) -> Self {
        if is_sidecar(c) {
            Self::Sidecar
        } else {
            Self::Init
        }
    }
}

/// Where one container stands after its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Running, nothing done.
    Running,
    /// Waiting (back-off), nothing done.
    Waiting,
    /// The runtime was changed (started, killed or removed an instance).
    Acted,
    /// Exited and not restarted; `ok` = exit code 0.
    Exited { ok: bool },
}

impl Step {
    fn acted(self) -> bool {
        self == Self::Acted
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Syncs the pod once; returns when it must run again at the latest.
    pub(super) async fn sync(&mut self) -> Result<Option<Instant>> {
        // Image volumes are pulled again by the next sync that starts a container.
        self.image_volume_pulls = None;
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.delete();
        }
        if self.state.is_terminating() {
            self.terminate().await?;
            return Ok(None);
        }
        if self.held && self.state == PodState::Pending {
            // hold-upgrade: nothing admitted or started until the release.
            self.report(&Observation::default()).await;
            return Ok(None);
        }
        self.admit();
        if let PodState::Rejected(_) = self.state {
            // kubelet: a pod the node does not admit fails at once, nothing created.
            self.report(&Observation::default()).await;
            return Ok(None);
        }
        let mut wake = Wake::default();
        if self.enforce_deadline(&mut wake).await? {
            return Ok(None);
        }
        let mut obs = self.observe().await?;
        if self.resize(&obs, &mut wake).await? {
            obs = self.observe().await?;
        }
        if !self.state.is_finished() && self.step(&obs, &mut wake).await? {
            let had_sandbox = obs.sandbox().is_some();
            obs = self.observe().await?;
            if !had_sandbox && obs.sandbox().is_some() && !self.state.is_finished() {
                // A new sandbox runs: report ContainerCreating, then start the containers in
                // this same sync (kubelet: one `SyncPod` creates the sandbox and starts the
                // containers) instead of observing Docker once more on the next.
                self.report(&obs).await;
                wake = Wake::default();
                if self.step(&obs, &mut wake).await? {
                    obs = self.observe().await?;
                }
            }
        }
        self.report(&obs).await;
        Ok(wake.0)
    }

    /// What Docker holds for the pod; remembers the pod's IP: the running sandbox's, or the
    /// one its container holding the pod's network was created with.
    pub(super) async fn observe(&mut self) -> Result<Observation> {
        let obs = observe(&self.ctx.runtime, &self.uid).await?;
        let ip = obs.sandbox().and_then(|s| s.ip.as_deref());
        if let Some(ip) = ip.or_else(|| obs.own_ip()) {
            self.sandbox_ip = Some(ip.to_owned());
        }
        Ok(obs)
    }

    /// What the containers of this sync join: the running sandbox (created first if there is
    /// none), or, for a pod without a sandbox, its own network. `Err(changed)`: nothing to
    /// start with yet (a sandbox was just created: `true`; the pod network is not ready:
    /// `false`); `wake` says when to look again.
    async fn holder(
        &mut self,
        obs: &Observation,
        wake: &mut Wake,
    ) -> Result<std::result::Result<Holder, bool>> {
        if self.sandboxless(obs) {
            return Ok(match self.own_network() {
                Ok(own) => Ok(Holder::Own(Some(own))),
                // A running container is kept and observed; only starts wait.
                Err(_) if obs.all().any(|i| i.state == RunState::Running) => Ok(Holder::Own(None)),
                Err(reason) => {
                    self.network_not_ready(&Error::NetworkNotReady(reason), wake);
                    Err(false)
                }
            });
        }
        if let Some(sandbox) = obs.sandbox() {
            return Ok(Ok(Holder::Sandbox(Box::new(sandbox.clone()))));
        }
        // While the pod network is undecided (no Node yet, a new Node awaiting its podCIDR,
        // the network failed) nothing is created for a pod on it, as the kubelet syncs no
        // pod but hostNetwork ones while its network is not ready: a pod of one container
        // then starts without a sandbox once the network is ready, and no
        // `edged.sandbox.create` span is recorded for a sandbox that was never made.
        if !crate::spec::host_network(&self.pod) {
            let network = self.ctx.network.borrow().sandbox_network();
            if let Err(reason) = network {
                self.network_not_ready(&Error::NetworkNotReady(reason), wake);
                return Ok(Err(false));
            }
        }
        Ok(Err(self.new_sandbox(obs, wake).await?))
    }

    /// Nothing can be created until the pod network is ready: the kubelet's event, and a
    /// look again soon (its sync period).
    fn network_not_ready(&mut self, e: &Error, wake: &mut Wake) {
        self.pod_event(EventType::Warning, "NetworkNotReady", e.to_string());
        wake.at(Instant::now() + NETWORK_RETRY);
    }

    /// Creates the pod's sandbox, setting its volumes up meanwhile; returns whether it was
    /// created (not: the pod network is not ready).
    async fn new_sandbox(&mut self, obs: &Observation, wake: &mut Wake) -> Result<bool> {
        self.transition(PodEvent::SandboxMissing);
        if !obs.sandboxes.is_empty() {
            let msg = "Pod sandbox changed, it will be killed and re-created.".to_owned();
            self.pod_event(EventType::Normal, "SandboxChanged", msg);
        }
        let span = verge_telemetry::propagation::in_trace(|| {
            verge_telemetry::span!("edged.sandbox.create")
        });
        // The volumes do not depend on the sandbox: set them up while Docker starts it.
        let prepare: OptionFuture<_> = (self.volumes.is_none() && self.prepared.is_none())
            .then(|| {
                let (ctx, pod) = (Arc::clone(&self.ctx), Arc::clone(&self.pod));
                async move { ctx.volumes.prepare(&pod).await }
            })
            .into();
        let (created, prepared) = tokio::join!(self.create_sandbox(obs).instrument(span), prepare);
        if prepared.is_some() {
            self.prepared = prepared;
        }
        match created {
            Ok(()) => {
                wake.at(Instant::now());
                Ok(true)
            }
            Err(e @ Error::NetworkNotReady(_)) => {
                self.network_not_ready(&e, wake);
                Ok(false)
            }
            Err(e) => {
                let msg = format!("Failed to create pod sandbox: {}", ErrorChain(&e));
                self.pod_event(EventType::Warning, "FailedCreatePodSandBox", msg);
                Err(e)
            }
        }
    }

    /// Takes the next lifecycle step; returns whether Docker changed.
    async fn step(&mut self, obs: &Observation, wake: &mut Wake) -> Result<bool> {
        let holder = match self.holder(obs, wake).await? {
            Ok(holder) => holder,
            Err(changed) => return Ok(changed),
        };
        if !self.ensure_volumes(wake).await {
            return Ok(false);
        }
        let pass = Pass {
            obs,
            holder: &holder,
            policy: RestartPolicy::of(&self.pod),
        };
        let mut changed = false;
        let pod = Arc::clone(&self.pod);
        let spec = spec_of(&pod);
        let initialized = spec
            .containers
            .iter()
            .any(|c| obs.latest(&c.name).is_some());
        if initialized {
            // Sidecars keep running beside the app containers.
            for c in spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| is_sidecar(c))
            {
                changed |= self
                    .container_step(c, Role::Sidecar, &pass, wake)
                    .await?
                    .acted();
            }
        } else {
            for c in spec.init_containers.iter().flatten() {
                let role = Role::of_init(c);
                let step = self.container_step(c, role, &pass, wake).await?;
                changed |= step.acted();
                if role == Role::Sidecar {
                    // The next init container waits until this one has started; a probe
                    // update or the next pass (at once after a start) looks again.
                    if step == Step::Running && self.ctx.probes.started(&self.uid, &c.name) {
                        continue;
                    }
                    if step.acted() {
                        wake.at(Instant::now());
                    }
                    self.transition(PodEvent::InitRunning);
                    return Ok(changed);
                }
                match step {
                    Step::Exited { ok: true } => continue,
                    Step::Exited { ok: false } => {
                        warn!(container = %c.name, "init container failed; pod failed");
                        self.wind_down(obs, holder.sandbox()).await;
                        self.transition(PodEvent::Finished { succeeded: false });
                        return Ok(true);
                    }
                    Step::Running | Step::Waiting | Step::Acted => {
                        self.transition(PodEvent::InitRunning);
                        return Ok(changed);
                    }
                }
            }
        }
        self.transition(PodEvent::Initialized);
        let (mut active, mut all_ok) = (false, true);
        for c in &spec.containers {
            let step = self.container_step(c, Role::App, &pass, wake).await?;
            changed |= step.acted();
            match step {
                Step::Running | Step::Waiting | Step::Acted => active = true,
                Step::Exited { ok } => all_ok &= ok,
            }
        }
        for c in ephemeral_containers(spec) {
            changed |= self
                .container_step(&c, Role::Ephemeral, &pass, wake)
                .await?
                .acted();
        }
        if !active {
            info!(succeeded = all_ok, "pod completed");
            self.wind_down(obs, holder.sandbox()).await;
            self.transition(PodEvent::Finished { succeeded: all_ok });
            changed = true;
        }
        Ok(changed)
    }

    /// The pod is done for good (every app container or an init container exited, or it was
    /// evicted): stop what still runs (`preStop` first, within the grace period), then the
    /// sandbox. The caller then moves the pod to its done state (Completed or Evicted).
    pub(super) async fn wind_down(&mut self, obs: &Observation, sandbox: Option<&Instance>) {
        let grace = self.grace();
        for i in obs
            .all()
            .filter(|i| !i.labels.sandbox && i.state == RunState::Running)
        {
            self.killing_event(&i.labels.container, None);
            self.ctx
                .probes
                .remove_container(&self.uid, &i.labels.container);
            if let Err(e) = self.kill(&i.labels.container, &i.id, grace).await {
                warn!(error = %ErrorChain(&e), "cannot stop sidecar");
            }
        }
        if let Some(sandbox) = sandbox
            && let Err(e) = self.ctx.runtime.stop(&sandbox.id, Duration::ZERO).await
        {
            warn!(error = %ErrorChain(&e), "cannot stop sandbox");
        }
    }

    /// One container's step: adopt, kill (probe failure), restart with back-off, or start,
    /// as the container's [`ContainerTrack`](super::state::ContainerTrack) decides.
    async fn container_step(
        &mut self,
        c: &Container,
        role: Role,
        pass: &Pass<'_>,
        wake: &mut Wake,
    ) -> Result<Step> {
        let now = Instant::now();
        let Some(i) = pass.obs.latest(&c.name) else {
            let decision = self.track(&c.name).on_absent(now);
            return Ok(self.decided(c, role, pass, decision, wake).await);
        };
        match i.state {
            RunState::Running => {
                let t = self.track(&c.name);
                if let Some(probe) = t.on_running(&i.id) {
                    info!(container = %c.name, %probe, "probe failed; killing container");
                    self.killing_event(&c.name, Some(probe));
                    self.ctx.probes.remove_container(&self.uid, &c.name);
                    // kubelet: `setTerminationGracePeriod`: the failed probe's own
                    // `terminationGracePeriodSeconds` overrides the pod's.
                    let grace = probe
                        .probe_of(c)
                        .and_then(|p| p.termination_grace_period_seconds)
                        .map_or_else(
                            || self.grace(),
                            |s| Duration::from_secs(u64::try_from(s).unwrap_or(0)),
                        );
                    self.kill(&c.name, &i.id, grace).await?;
                    wake.at(now);
                    return Ok(Step::Acted);
                }
                if matches!(role, Role::App | Role::Sidecar)
                    && let Some(container_id) = t.probe()
                {
                    let target = ProbeTarget {
                        namespace: self.key.namespace.clone(),
                        pod: self.key.name.clone(),
                        pod_uid: self.uid.clone(),
                        container: c.name.clone(),
                        container_id,
                        pod_ip: self.pod_ip(),
                    };
                    self.ctx.probes.add(target, c);
                }
                Ok(Step::Running)
            }
            RunState::Created => {
                // An interrupted start: finish it.
                if let Err(e) = self.ctx.runtime.start(&i.id).await {
                    warn!(error = %ErrorChain(&e), "cannot start created container; recreating");
                    self.ctx.runtime.remove_if_present(&i.id).await?;
                }
                Ok(Step::Acted)
            }
            RunState::Exited => {
                let pod = self.pod_display();
                let since = i.finished_at.as_ref().map_or(Duration::ZERO, |f| {
                    let now = verge_edge_store::clock::now();
                    Duration::try_from(now.duration_since(f.0)).unwrap_or(Duration::ZERO)
                });
                let restarts = match role {
                    Role::Sidecar => true,
                    Role::Ephemeral => false,
                    Role::Init => pass.policy.restarts(i.exit_code, true),
                    Role::App => pass.policy.restarts_app(c, i.exit_code),
                };
                let t = self.track(&c.name);
                let unprobe = t.unprobe(&i.id);
                let decision = t.on_exit(i, restarts, since, now, &pod);
                if unprobe {
                    self.ctx.probes.remove_container(&self.uid, &c.name);
                }
                if let ExitDecision::BackOff { .. } = decision {
                    let msg = format!(
                        "Back-off restarting failed container {} in pod {pod}",
                        c.name
                    );
                    self.container_event(&c.name, EventType::Warning, "BackOff", msg);
                }
                Ok(self.decided(c, role, pass, decision, wake).await)
            }
        }
    }

    /// Carries out what the container's track decided: start, wait (with the image pull
    /// back-off events), or leave it exited.
    async fn decided(
        &mut self,
        c: &Container,
        role: Role,
        pass: &Pass<'_>,
        decision: ExitDecision,
        wake: &mut Wake,
    ) -> Step {
        match decision {
            ExitDecision::Done { ok } => Step::Exited { ok },
            ExitDecision::BackOff { until, reason } => {
                wake.at(until);
                if reason == Some(WaitingReason::ImagePullBackOff) {
                    let image = c.image.as_deref().unwrap_or_default();
                    let msg = format!("Back-off pulling image \"{image}\"");
                    self.container_event(&c.name, EventType::Normal, "BackOff", msg);
                    let msg = "Error: ImagePullBackOff".to_owned();
                    self.container_event(&c.name, EventType::Warning, "Failed", msg);
                }
                Step::Waiting
            }
            ExitDecision::Start { restart_count } => {
                self.start(c, restart_count, role, pass, wake).await;
                Step::Acted
            }
        }
    }
}

/// The pod's ephemeral containers as containers (the same fields, bar
/// `targetContainerName`); one that does not convert is skipped with a warning.
pub(super) fn ephemeral_containers(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<Container> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .filter_map(|e| {
            let converted = serde_json::to_value(e).and_then(serde_json::from_value::<Container>);
            converted
                .inspect_err(
                    |error| warn!(container = %e.name, %error, "skipping ephemeral container"),
                )
                .ok()
        })
        .collect()
}
