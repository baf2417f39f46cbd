//! Carrying a resize plan out (kubelet `doPodResizeAction`): restarts, the memory check,
//! in-place memory then CPU updates, and the actuated resources they leave.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Container;
use tracing::{info, warn};

use super::super::observe::Observation;
use super::super::own_network::Holder;
use super::super::state::RestartPolicy;
use super::super::sync::{Pass, Role, Wake};
use super::super::{Worker, spec_of};
use super::{container, now};
use crate::Result;
use crate::events::EventType;
use crate::resize::Plan;
use crate::resize::conditions::ERROR;
use crate::resize::plan::{lowered_memory_limits, memory_limit_error};
use crate::resize::status::event_message;
use crate::resources::Resources;
use verge_container_runtime::ContainerRuntime;
use verge_runtime::ErrorChain;

impl<R: ContainerRuntime> Worker<R> {
    /// Applies `plan` (kubelet `doPodResizeAction`): restarts, the memory check, memory
    /// updates, CPU updates; the first failure stops it and is reported as
    /// `PodResizeInProgress` reason `Error` (retried at the next sync).
    pub(super) async fn actuate(
        &mut self,
        plan: Plan,
        obs: &Observation,
        holder: &Holder,
        wake: &mut Wake,
    ) -> Result<bool> {
        let pod = Arc::clone(&self.pod);
        let mut changed = false;
        for (name, id) in &plan.restart {
            let (Some(c), Some(latest)) = (container(&pod, name), obs.latest(name)) else {
                continue;
            };
            let msg = format!("Container {name} resize requires restart");
            self.container_event(name, EventType::Normal, "Killing", msg);
            self.ctx.probes.remove_container(&self.uid, name);
            if let Err(e) = self.kill(name, id, self.grace()).await {
                warn!(container = %name, error = %ErrorChain(&e), "cannot stop container to resize it");
                continue;
            }
            changed = true;
            let track = self.track(name);
            track.saw_instance(latest.labels.restart_count);
            let restart_count = track.next_restart();
            let init = spec_of(&pod)
                .init_containers
                .iter()
                .flatten()
                .any(|i| i.name == *name);
            let role = if init { Role::Sidecar } else { Role::App };
            let pass = Pass {
                obs,
                holder,
                policy: RestartPolicy::of(&pod),
            };
            self.start(c, restart_count, role, &pass, wake).await;
        }
        let lowered = lowered_memory_limits(&plan);
        if !lowered.is_empty() {
            let mut checked = Vec::new();
            for (name, id, limit) in lowered {
                match self.ctx.runtime.memory_usage(id).await {
                    Ok(usage) => checked.push((name, limit, usage)),
                    Err(e) => {
                        warn!(error = %ErrorChain(&e), "cannot read memory usage");
                        let msg = format!(
                            "unable to read memory usage for pod {:?}",
                            self.pod_display()
                        );
                        self.resize_failed(&msg);
                        return Ok(changed);
                    }
                }
            }
            if let Some(msg) = memory_limit_error(&checked) {
                self.resize_failed(&msg);
                return Ok(changed);
            }
        }
        let updates = plan.memory.iter().map(|u| (u, true));
        for (u, memory) in updates.chain(plan.cpu.iter().map(|u| (u, false))) {
            let Some(checkpoint) = self.resize.checkpoint.as_mut() else {
                break;
            };
            let mut values = checkpoint
                .actuated
                .get(&u.name)
                .copied()
                .unwrap_or_default();
            if memory {
                values.memory_limit = u.desired.memory_limit;
                values.memory_request = u.desired.memory_request;
            } else {
                values.cpu_limit = u.desired.cpu_limit;
                values.cpu_request = u.desired.cpu_request;
            }
            if let Err(e) = self
                .ctx
                .runtime
                .update_resources(&u.id, &values.linux())
                .await
            {
                self.save_checkpoint().await;
                self.resize_failed(&ErrorChain(&e).to_string());
                return Ok(changed);
            }
            if let Some(checkpoint) = self.resize.checkpoint.as_mut() {
                checkpoint.actuated.insert(u.name.clone(), values);
            }
            changed = true;
            info!(container = %u.name, memory, "container resized in place");
        }
        if !plan.memory.is_empty() || !plan.cpu.is_empty() {
            self.save_checkpoint().await;
        }
        Ok(changed)
    }

    /// Records a failed actuation (kubelet: `PodResizeInProgress` reason `Error`, event
    /// `ResizeError` when the condition changed).
    fn resize_failed(&mut self, message: &str) {
        warn!(%message, "pod resize failed");
        let generation = self.pod.metadata.generation;
        let (generation, changed) =
            self.resize
                .conditions
                .set_in_progress(ERROR, message, generation, &now());
        if changed {
            let msg = event_message("Pod resize error", &self.pod, generation, message);
            self.pod_event(EventType::Warning, "ResizeError", msg);
        }
    }

    /// Container `c` was started with its allocated resources: they are its actuated ones
    /// (kubelet: `startContainer` records them).
    pub(in crate::pod_worker) async fn resize_started(&mut self, c: &Container) {
        let values = Resources::of(c.resources.as_ref());
        let Some(checkpoint) = self.resize.checkpoint.as_mut() else {
            return;
        };
        if !checkpoint.allocated.contains_key(&c.name)
            || checkpoint.actuated.get(&c.name) == Some(&values)
        {
            return;
        }
        checkpoint.actuated.insert(c.name.clone(), values);
        self.save_checkpoint().await;
    }
}
