//! The pod worker's side of in-place resize ([`crate::resize`]): at each sync, decide whether
//! a resize asked for by the pod's spec is allocated, run the worker on the allocated pod
//! (kubelet: the pod workers sync `UpdatePodFromAllocation(pod)`), apply the allocation to the
//! running containers; when reporting, add the resources and the resize conditions to the
//! status. The worker's pod is the allocated copy; the pod as the cloud wants it is kept in
//! [`ResizeState`] until a newer one arrives.
//!
//! # Layout
//! - this file: [`ResizeState`], the allocation decision and the plan.
//! - `apply`: carrying the plan out against the runtime.
//! - `report`: the resize parts of the status.

mod apply;
mod report;

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{info, warn};

use super::observe::{Observation, RunState};
use super::own_network::Holder;
use super::state::is_sidecar;
use super::sync::Wake;
use super::{Worker, spec_of};
use crate::Result;
use crate::admission::{Insufficient, Pending, Requests};
use crate::events::EventType;
use crate::resize::plan::plan;
use crate::resize::status::event_message;
use crate::resize::{Checkpoint, Plan, ResizeConditions, Running};
use verge_container_runtime::ContainerRuntime;

/// What a worker keeps for resizes between syncs. The pod's share of the node, at its
/// allocation, is its entry in the registry of admitted pods ([`crate::admission`]), held by
/// the worker's admission ticket.
pub(crate) struct ResizeState {
    /// Loaded (or made, for a pod just admitted) at the first sync.
    checkpoint: Option<Checkpoint>,
    /// The newest pod as the cloud wants it.
    desired: Arc<Pod>,
    /// The allocated pod handed to the worker: while the worker's pod is this very one, no
    /// newer pod arrived.
    installed: Option<Arc<Pod>>,
    conditions: ResizeConditions,
}

impl ResizeState {
    /// The state of a worker starting on `pod`, with the conditions its status holds.
    pub(super) fn new(pod: &Arc<Pod>) -> Self {
        Self {
            checkpoint: None,
            desired: Arc::clone(pod),
            installed: None,
            conditions: ResizeConditions::backfill(pod),
        }
    }
}

/// The spec of container `name` of `pod` (an init or app container).
fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == name)
}

fn now() -> Time {
    Time(verge_edge_store::clock::now())
}

impl<R: ContainerRuntime> Worker<R> {
    fn pod_dir(&self) -> PathBuf {
        self.ctx.config.pods_dir().join(&self.uid)
    }

    /// Writes the checkpoint (a failure is logged: the next change writes it again).
    async fn save_checkpoint(&self) {
        let (Some(c), dir) = (self.resize.checkpoint.clone(), self.pod_dir()) else {
            return;
        };
        match tokio::task::spawn_blocking(move || c.save(&dir)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "cannot write the resource checkpoint"),
            Err(e) => warn!(error = %e, "cannot write the resource checkpoint"),
        }
    }

    /// The checkpoint of the pod: read back, or made from `desired` for a pod just admitted.
    async fn load_checkpoint(&mut self, desired: &Pod) {
        if self.resize.checkpoint.is_some() {
            return;
        }
        let dir = self.pod_dir();
        let loaded = tokio::task::spawn_blocking(move || Checkpoint::load(&dir)).await;
        match loaded {
            Ok(Ok(Some(c))) => self.resize.checkpoint = Some(c),
            other => {
                if let Ok(Err(e)) = other {
                    warn!(error = %e, "resource checkpoint unreadable; allocating the spec");
                }
                self.resize.checkpoint = Some(Checkpoint::admitted(desired));
                self.save_checkpoint().await;
            }
        }
    }

    /// One sync's resize: allocate what the spec asks if the node can, run on the allocated
    /// pod, apply the allocation to the running containers. Returns whether the runtime
    /// changed (a container restarted or updated: the caller observes it again).
    pub(super) async fn resize(&mut self, obs: &Observation, wake: &mut Wake) -> Result<bool> {
        let replaced = self
            .resize
            .installed
            .as_ref()
            .is_none_or(|i| !Arc::ptr_eq(i, &self.pod));
        if replaced {
            self.resize.desired = Arc::clone(&self.pod);
        }
        let desired = Arc::clone(&self.resize.desired);
        if self.state.is_finished() {
            self.resize.conditions.clear();
            return Ok(false);
        }
        self.load_checkpoint(&desired).await;
        let started = self.allocate(&desired).await;
        if replaced || started {
            let pod = match &self.resize.checkpoint {
                Some(c) if c.differs(&desired) => Arc::new(c.allocated_pod(&desired)),
                _ => Arc::clone(&desired),
            };
            self.pod = Arc::clone(&pod);
            self.resize.installed = Some(pod);
        }
        // What a container restarted by the resize joins (a pod without a sandbox: its own
        // network, as at its start).
        let holder = match obs.sandbox() {
            Some(sandbox) => Holder::Sandbox(Box::new(sandbox.clone())),
            None if self.sandboxless(obs) => Holder::Own(self.own_network().ok()),
            None => return Ok(false),
        };
        // Unlike the kubelet, whose status generated before `SyncPod` shows the resize in
        // progress, the status goes out after the allocation is applied: it shows
        // `PodResizeInProgress` only while something is left to apply (an error, a container
        // not updated yet).
        let plan = self.resize_plan(obs);
        if plan.is_empty() {
            return Ok(false);
        }
        self.actuate(plan, obs, &holder, wake).await
    }

    /// Decides on the resize `desired` asks for, if any (kubelet `handlePodResourcesResize`):
    /// the registry of admitted pods allocates its effective requests if the node has room
    /// ([`crate::admission::Admitted::resize`]); returns whether one was allocated now.
    async fn allocate(&mut self, desired: &Pod) -> bool {
        let Some(differs) = self.resize.checkpoint.as_ref().map(|c| c.differs(desired)) else {
            return false;
        };
        let generation = desired.metadata.generation;
        if !differs {
            self.resize.conditions.clear_pending();
            return false;
        }
        let verdict = self
            .ctx
            .admitted
            .resize(&self.uid, &Requests::of_pod(desired));
        if let Err(Insufficient { pending, message }) = verdict {
            if self
                .resize
                .conditions
                .set_pending(pending.as_str(), &message, generation, &now())
            {
                info!(reason = pending.as_str(), %message, "pod resize pending");
                let (reason, prefix) = match pending {
                    Pending::Infeasible => ("ResizeInfeasible", "Pod resize Infeasible"),
                    Pending::Deferred => ("ResizeDeferred", "Pod resize Deferred"),
                };
                let msg = event_message(prefix, desired, generation, &message);
                self.pod_event(EventType::Warning, reason, msg);
            }
            return false;
        }
        if let Some(checkpoint) = self.resize.checkpoint.as_mut() {
            checkpoint.allocate(desired);
        }
        self.save_checkpoint().await;
        let c = &mut self.resize.conditions;
        c.clear_pending();
        c.clear_in_progress();
        c.set_in_progress("", "", generation, &now());
        info!(?generation, "pod resize allocated");
        let msg = event_message("Pod resize started", desired, generation, "");
        self.pod_event(EventType::Normal, "ResizeStarted", msg);
        true
    }

    /// The running containers whose actuated resources differ from the allocation
    /// (kubelet `computePodResizeAction` over the running containers).
    fn resize_plan(&self, obs: &Observation) -> Plan {
        let Some(checkpoint) = &self.resize.checkpoint else {
            return Plan::default();
        };
        let spec = spec_of(&self.pod);
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| (c, is_sidecar(c)));
        let running = init
            .chain(spec.containers.iter().map(|c| (c, true)))
            .filter_map(|(c, restartable)| {
                let i = obs
                    .latest(&c.name)
                    .filter(|i| i.state == RunState::Running)?;
                Some(Running {
                    spec: c,
                    id: &i.id,
                    restartable,
                })
            });
        plan(running, &checkpoint.actuated)
    }
}
