//! Building the pod's status from the worker's view and handing it to the status manager.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::debug;
use verge_runtime::ErrorChain;

use super::observe::{Observation, RunState};
use super::state::{PodState, WaitingReason, is_sidecar};
use super::{Worker, spec_of};
use crate::metrics::Stage;
use crate::status::build::{ContainerFacts, PodFacts, container_status, pod_status};
use crate::termination_message;
use verge_container_runtime::ContainerRuntime;
use verge_container_runtime::image::image_ref;

impl<R: ContainerRuntime> Worker<R> {
    /// Reads the termination message of every exited instance `obs` shows that has none yet
    /// (the newest two of each container: the state and the last state), and forgets those
    /// of instances gone ([`crate::termination_message`]).
    async fn load_termination_messages(&mut self, obs: &Observation) {
        let pod = Arc::clone(&self.pod);
        let spec = spec_of(&pod);
        let pod_dir = self.ctx.config.pods_dir().join(&self.uid);
        let mut seen = HashSet::new();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            for i in obs.containers.get(&c.name).into_iter().flatten().take(2) {
                seen.insert(i.id.clone());
                if i.state != RunState::Exited || self.termination_messages.contains_key(&i.id) {
                    continue;
                }
                let mut message = String::new();
                if termination_message::container_path(c).is_some() {
                    let path =
                        termination_message::host_path(&pod_dir, &c.name, i.labels.restart_count);
                    message = tokio::task::spawn_blocking(move || termination_message::read(&path))
                        .await
                        .unwrap_or_default();
                }
                // Not for an instance the engine could not run (it has no log).
                let ran = i.error.as_deref().is_none_or(str::is_empty);
                if message.is_empty()
                    && termination_message::falls_back_to_logs(c)
                    && i.exit_code != 0
                    && ran
                {
                    let lines = termination_message::MAX_LOG_LINES;
                    match self.ctx.runtime.log_tail(&i.id, lines).await {
                        Ok(log) => message = termination_message::from_log(&log),
                        Err(e) => {
                            debug!(error = %ErrorChain(&e), "no log for the termination message")
                        }
                    }
                }
                self.termination_messages.insert(i.id.clone(), message);
            }
        }
        self.termination_messages.retain(|id, _| seen.contains(id));
    }

    fn facts<'a>(
        &'a self,
        obs: &'a Observation,
        c: &'a Container,
        init: bool,
    ) -> ContainerFacts<'a> {
        let latest = obs.latest(&c.name);
        let track = self.tracks.get(&c.name);
        // Sidecars are probed like app containers; regular init containers never are.
        let completes = init && !is_sidecar(c);
        // A running container the probe manager has not been given yet (its start is being
        // reported before the sync that adds it): as the kubelet's `UpdatePodStatus` says of a
        // container without a probe worker, started without a startup probe and ready without
        // startup and readiness probes, so `Running` and `Ready` are reported together.
        let probes = &self.ctx.probes;
        let known = probes.contains(&self.uid, &c.name);
        let started = if known {
            probes.started(&self.uid, &c.name)
        } else {
            c.startup_probe.is_none()
        };
        let ready = if known {
            probes.ready(&self.uid, &c.name)
        } else {
            started && c.readiness_probe.is_none()
        };
        ContainerFacts {
            spec: c,
            latest,
            previous: obs.previous(&c.name),
            waiting: track.and_then(|t| t.waiting()),
            restarts: track.map_or(0, |t| t.next_restart()),
            ready: !completes && ready,
            started: !completes && started,
            completes,
            image_id: latest
                .and_then(|i| self.image_ids.get(&i.image_id))
                .map_or("", String::as_str),
            termination_messages: &self.termination_messages,
        }
    }

    /// Reports the status as of `obs` (the status manager drops unchanged ones).
    pub(super) async fn report(&mut self, obs: &Observation) {
        self.load_termination_messages(obs).await;
        for i in obs.containers.values().filter_map(|v| v.first()) {
            if !i.image_id.is_empty() && !self.image_ids.contains_key(&i.image_id) {
                let r = image_ref(&self.ctx.runtime, &i.image_id).await;
                self.image_ids.insert(i.image_id.clone(), r);
            }
        }
        let pod = Arc::clone(&self.pod);
        let spec = spec_of(&pod);
        let init: Vec<ContainerFacts<'_>> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| self.facts(obs, c, true))
            .collect();
        let app: Vec<ContainerFacts<'_>> = spec
            .containers
            .iter()
            .map(|c| self.facts(obs, c, false))
            .collect();
        let pod_facts = PodFacts {
            pod: &self.pod,
            state: &self.state,
            host_ip: self.ctx.node_ip.map(|ip| ip.to_string()),
            pod_ip: self.pod_ip(),
            start_time: self.start_time.clone(),
        };
        let now = Time(verge_edge_store::clock::now());
        let mut status = pod_status(&pod_facts, &init, &app, self.last_status.as_ref(), &now);
        // Ephemeral containers: never probed, so never ready; started while running.
        let ephemeral = super::sync::ephemeral_containers(spec);
        let ephemeral: Vec<_> = ephemeral
            .iter()
            .map(|c| {
                let facts = ContainerFacts {
                    ready: false,
                    started: true,
                    ..self.facts(obs, c, false)
                };
                container_status(&facts, WaitingReason::ContainerCreating)
            })
            .collect();
        status.ephemeral_container_statuses = Some(ephemeral).filter(|e| !e.is_empty());
        if let PodState::Stopped { .. } = self.state {
            // kubelet: `TerminatePod` makes the stopped pod's last status terminal.
            status = crate::status::terminal::terminate_pod(&pod, status);
        }
        self.resize_status(&mut status, obs);
        // hold-upgrade's condition: True while held, False from the release on.
        let last = self
            .last_status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == crate::hold::CONDITION));
        if self.held || last.is_some() {
            let held = crate::hold::condition(self.held, last, &now);
            status.conditions.get_or_insert_with(Vec::new).push(held);
        }
        if status.phase.as_deref() == Some("Running")
            && let Some(since) = self.starting_since.take()
        {
            crate::metrics::global().pod_start(Stage::Total, since.elapsed());
        }
        self.ctx
            .status
            .update(&self.key, &self.uid, status.clone())
            .await;
        self.last_status = Some(status);
    }
}
