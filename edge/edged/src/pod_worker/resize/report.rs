//! The resize parts of the pod's status: each container's `resources` and
//! `allocatedResources`, and the resize conditions.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

use super::super::observe::{Observation, RunState};
use super::super::{Worker, spec_of};
use super::{container, now};
use crate::events::EventType;
use crate::resize::status::{Observed, container_resources, event_message};
use crate::resources::{Resources, applied};
use verge_container_runtime::ContainerRuntime;

impl<R: ContainerRuntime> Worker<R> {
    /// Whether a running container's actuated resources differ from its allocation (kubelet
    /// `IsPodResizeInProgress`).
    fn resize_in_progress(&self, obs: &Observation) -> bool {
        let Some(checkpoint) = &self.resize.checkpoint else {
            return false;
        };
        let spec = spec_of(&self.pod);
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .filter(|c| {
                obs.latest(&c.name)
                    .is_some_and(|i| i.state == RunState::Running)
            })
            .any(|c| {
                checkpoint
                    .actuated
                    .get(&c.name)
                    .copied()
                    .unwrap_or_default()
                    != Resources::of(c.resources.as_ref())
            })
    }

    /// Adds the resize parts to `status` built from `obs`: each container's `resources` and
    /// `allocatedResources`, and the resize conditions (none for a terminal pod; set or
    /// cleared as the running containers match the allocation, with `ResizeCompleted`).
    pub(in crate::pod_worker) fn resize_status(
        &mut self,
        status: &mut PodStatus,
        obs: &Observation,
    ) {
        let terminal = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        if terminal {
            self.resize.conditions.clear();
        } else if self.resize.checkpoint.is_some() {
            let generation = self.pod.metadata.generation;
            if self.resize_in_progress(obs) {
                self.resize
                    .conditions
                    .set_in_progress("", "", generation, &now());
            } else if let Some(generation) = self.resize.conditions.clear_in_progress() {
                let msg = event_message("Pod resize completed", &self.pod, generation, "");
                self.pod_event(EventType::Normal, "ResizeCompleted", msg);
            }
        }
        let old: HashMap<&str, &ContainerStatus> = self
            .last_status
            .iter()
            .flat_map(|s| {
                let init = s.init_container_statuses.iter().flatten();
                let eph = s.ephemeral_container_statuses.iter().flatten();
                init.chain(s.container_statuses.iter().flatten()).chain(eph)
            })
            .map(|s| (s.name.as_str(), s))
            .collect();
        let actuated = self.resize.checkpoint.as_ref().map(|c| &c.actuated);
        let statuses = status
            .init_container_statuses
            .iter_mut()
            .flatten()
            .chain(status.container_statuses.iter_mut().flatten())
            .chain(status.ephemeral_container_statuses.iter_mut().flatten());
        for s in statuses {
            let Some(i) = obs.latest(&s.name) else {
                continue;
            };
            let spec = container(&self.pod, &s.name).and_then(|c| c.resources.as_ref());
            let running = i.state == RunState::Running;
            let previous = old.get(s.name.as_str()).filter(|o| {
                o.container_id == s.container_id
                    && o.state.as_ref().is_some_and(|st| st.running.is_some())
            });
            let observed = running.then(|| Observed {
                applied: applied(&i.resources),
                actuated: actuated.and_then(|a| a.get(&s.name)),
                old: previous.and_then(|o| o.resources.as_ref()),
            });
            s.resources = Some(container_resources(spec, observed));
            s.allocated_resources = spec.and_then(|r| r.requests.clone());
        }
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.extend(self.resize.conditions.list().cloned());
    }
}
