//! Graceful termination (kubelet: `killPod` + the pod's removal): stop every container with
//! the grace period (SIGTERM, SIGKILL after it), then the sandbox; report the last status,
//! with a terminal phase (kubelet: `TerminatePod`; also for a pod that never ran here);
//! remove the containers and the pod directory; remove the pod from the store; report the
//! completed deletion upstream (`delete <ns>/pod/<name>`, header uid).

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::PodSpec;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_core::{ResourceKey, ResourceType};

use super::Worker;
use super::hooks::MINIMUM_GRACE;
use super::observe::{Instance, Observation, RunState, observe};
use super::state::{PodEvent, PodState, is_sidecar};
use crate::Context;
use crate::Result;
use crate::status::terminal;
use verge_container_runtime::labels::{ContainerLabels, GRACE, PodRef};
use verge_container_runtime::{ContainerRuntime, ListFilter};
use verge_runtime::ErrorChain;

/// Grace period of orphans without the grace label (kubelet default).
const DEFAULT_GRACE: Duration = Duration::from_secs(30);

impl<R: ContainerRuntime> Worker<R> {
    /// Tears the pod down: while [`PodState::Terminating`], stops its containers and sandbox
    /// ([`PodState::Stopped`]); then reports its terminal status ([`Worker::report_terminal`])
    /// before anything is removed, removes its containers, directory and stored object, and
    /// reports the deletion; the state becomes [`PodState::Terminated`]. A failed step is
    /// retried by the next sync from where it stopped.
    pub(super) async fn terminate(&mut self) -> Result<()> {
        let obs = observe(&self.ctx.runtime, &self.uid).await?;
        self.ctx.probes.remove_pod(&self.uid);
        let ctx = std::sync::Arc::clone(&self.ctx);
        let rt = &ctx.runtime;
        if let PodState::Terminating { grace, .. } = self.state {
            // Nothing of the pod on this node (it was never started here, or torn down
            // already): no status to show while it terminates.
            let ran_here = obs.all().next().is_some();
            // Not ready while terminating (kubelet: readiness fails once the pod is deleted),
            // so that endpoints drop the pod before its containers stop.
            if ran_here {
                self.report(&obs).await;
            }
            let running = |sandbox: bool| {
                obs.all()
                    .filter(move |i| i.labels.sandbox == sandbox && i.state != RunState::Exited)
            };
            for i in running(false) {
                self.killing_event(&i.labels.container, None);
            }
            self.kill_containers(obs.clone(), grace).await?;
            for i in running(true) {
                rt.stop(&i.id, Duration::ZERO).await?;
            }
            self.transition(PodEvent::Killed);
        }
        let last = observe(rt, &self.uid).await?;
        self.report_terminal(&last).await;
        for i in last.all() {
            rt.remove_if_present(&i.id).await?;
        }
        self.release_ip();
        if let Err(e) = self.ctx.volumes.cleanup(&self.uid).await {
            warn!(error = %ErrorChain(&e), "cannot remove pod directory");
        }
        let (key, uid) = (self.key.clone(), self.uid.clone());
        self.ctx
            .store
            .blocking(move |s| s.delete(&key, &uid))
            .await?;
        self.ctx.status.deleted(&self.key, &self.uid).await;
        self.ctx.events.forget(&self.uid);
        info!("pod terminated and removed");
        self.transition(PodEvent::TornDown);
        Ok(())
    }

    /// Reports the terminal status of the stopped pod (kubelet: `SyncTerminatedPod`, then
    /// the status manager's `TerminatePod`), queued before the deletion is: phase `Succeeded`
    /// when every container stopped with exit code 0, else `Failed`, containers that never
    /// ended shown terminated with `ContainerStatusUnknown`
    /// ([`crate::status::terminal::terminate_pod`]). A status already terminal (this
    /// worker's last, else the API server's) stands. When nothing of the pod is on the node
    /// (`obs` empty: never started here, or torn down by an earlier worker before its object
    /// came back, held by a finalizer), the known status is made terminal rather than one
    /// built from nothing, which would turn terminated containers back into waiting ones; a
    /// pod without any container status gets them from its spec.
    async fn report_terminal(&mut self, obs: &Observation) {
        let known = self.last_status.as_ref().or(self.pod.status.as_ref());
        if known.is_some_and(terminal::is_terminal) {
            return;
        }
        let with_containers =
            known.filter(|s| s.container_statuses.as_ref().is_some_and(|c| !c.is_empty()));
        match with_containers {
            Some(known) if obs.all().next().is_none() => {
                let status = terminal::terminate_pod(&self.pod, known.clone());
                self.ctx
                    .status
                    .update(&self.key, &self.uid, status.clone())
                    .await;
                self.last_status = Some(status);
            }
            _ => self.report(obs).await,
        }
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Kills every running container of `obs` at once, each with its preStop hook first, in
    /// the kubelet's termination order: a sidecar (restartable init container) is signalled
    /// only once every app container and every sidecar after it in `initContainers` has
    /// stopped (bounded by its grace period), so sidecars serve the app containers' preStop
    /// hooks and stop in reverse order. When a newer deletion shortens the grace period meanwhile (a second delete with a
    /// smaller `gracePeriodSeconds`), the kills start over with the shorter period, as the
    /// kubelet's pod worker restarts `killPod`.
    async fn kill_containers(&self, mut obs: Observation, mut grace: Duration) -> Result<()> {
        let mut deletions = self.deletion_grace.clone();
        loop {
            let running: Vec<&Instance> = obs
                .all()
                .filter(|i| !i.labels.sandbox && i.state != RunState::Exited)
                .collect();
            let names: Vec<&str> = running
                .iter()
                .map(|i| i.labels.container.as_str())
                .collect();
            let order = TerminationOrder::new(self.pod.spec.as_ref(), &names);
            let kills = running.iter().map(|i| {
                let (waits_for, done) = order.turn(&i.labels.container);
                self.kill_in_turn(&i.labels.container, &i.id, grace, waits_for, done)
            });
            let shorter = tokio::select! {
                results = join_all(kills) => {
                    for r in results {
                        r?;
                    }
                    None
                }
                shorter = shorter_grace(&mut deletions, grace) => Some(shorter),
            };
            let Some(shorter) = shorter else {
                return Ok(());
            };
            info!(grace = ?shorter, "grace period shortened while terminating; killing again");
            grace = shorter;
            obs = observe(&self.ctx.runtime, &self.uid).await?;
        }
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// [`Worker::kill`] waiting its turn: preStop hook, then (within the grace left) until
    /// every token of `waits_for` is cancelled, then the stop with what is left (at least
    /// 2 s, kubelet: `minimumGracePeriodInSeconds`); cancels `done` when it ends, however.
    async fn kill_in_turn(
        &self,
        name: &str,
        container_id: &str,
        grace: Duration,
        waits_for: Vec<CancellationToken>,
        done: CancellationToken,
    ) -> verge_container_runtime::Result<()> {
        let _done = done.drop_guard();
        let left = self.pre_stop(name, container_id, grace).await;
        let waiting = Instant::now();
        let turn = join_all(waits_for.iter().map(CancellationToken::cancelled));
        let _ = tokio::time::timeout(left, turn).await;
        let left = left.saturating_sub(waiting.elapsed()).max(MINIMUM_GRACE);
        self.ctx.runtime.stop(container_id, left).await
    }
}

/// Who waits for whom when a pod's containers stop (kubelet: `terminationOrdering`): a
/// token per running container, cancelled when it has stopped.
struct TerminationOrder {
    done: HashMap<String, CancellationToken>,
    /// Running sidecars, in `initContainers` order.
    sidecars: Vec<String>,
    /// Running app containers.
    apps: Vec<String>,
}

impl TerminationOrder {
    /// The order among the `running` containers (spec names) of the pod of `spec`.
    fn new(spec: Option<&PodSpec>, running: &[&str]) -> Self {
        let done: HashMap<String, CancellationToken> = running
            .iter()
            .map(|name| ((*name).to_owned(), CancellationToken::new()))
            .collect();
        let sidecars = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| is_sidecar(c) && done.contains_key(&c.name))
            .map(|c| c.name.clone())
            .collect();
        let apps = spec
            .into_iter()
            .flat_map(|s| &s.containers)
            .filter(|c| done.contains_key(&c.name))
            .map(|c| c.name.clone())
            .collect();
        Self {
            done,
            sidecars,
            apps,
        }
    }

    /// What container `name` waits for before its stop, and its own token.
    fn turn(&self, name: &str) -> (Vec<CancellationToken>, CancellationToken) {
        let token = |n: &String| self.done.get(n).cloned();
        let waits_for = match self.sidecars.iter().position(|s| s == name) {
            Some(at) => self
                .apps
                .iter()
                .chain(&self.sidecars[at + 1..])
                .filter_map(token)
                .collect(),
            None => Vec::new(),
        };
        let own = self.done.get(name).cloned().unwrap_or_default();
        (waits_for, own)
    }
}

/// Returns the newest deletion grace period once it is shorter than `grace`.
async fn shorter_grace(deletions: &mut watch::Receiver<Option<i64>>, grace: Duration) -> Duration {
    loop {
        let newest = *deletions.borrow_and_update();
        if let Some(d) = newest
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .filter(|d| *d < grace)
        {
            return d;
        }
        if deletions.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Removes the containers of a pod that is no longer in the store (deleted while edgecore
/// was down, or left over): stop with the grace period from their labels, remove, clean up
/// the pod directory and report the deletion.
pub(crate) async fn cleanup_orphan<R: ContainerRuntime>(ctx: &Context<R>, pod: &PodRef) {
    let result: Result<()> = async {
        let containers = ctx.runtime.list(&ListFilter::pod(&pod.uid)).await?;
        if containers.is_empty() {
            return Ok(());
        }
        info!(pod = %pod.name, namespace = %pod.namespace, uid = %pod.uid, "removing orphaned pod containers");
        ctx.probes.remove_pod(&pod.uid);
        let stops = containers.iter().map(|c| {
            let sandbox = ContainerLabels::parse(&c.labels).is_some_and(|l| l.sandbox);
            let grace = c.labels.get(GRACE).and_then(|g| g.parse().ok()).map_or(DEFAULT_GRACE, Duration::from_secs);
            let id = c.id.clone();
            async move {
                let _ = ctx.runtime.stop(&id, if sandbox { Duration::ZERO } else { grace }).await;
                ctx.runtime.remove_if_present(&id).await
            }
        });
        for r in join_all(stops).await {
            r?;
        }
        crate::network::lock_ips(&ctx.pod_ips).release(&pod.uid);
        if let Err(e) = ctx.volumes.cleanup(&pod.uid).await {
            warn!(error = %ErrorChain(&e), "cannot remove pod directory");
        }
        ctx.status.deleted(&ResourceKey::new(&pod.namespace, ResourceType::Pod, &pod.name), &pod.uid).await;
        ctx.events.forget(&pod.uid);
        Ok(())
    }
    .await;
    if let Err(e) = result {
        warn!(uid = %pod.uid, error = %ErrorChain(&e), "orphan clean-up failed; retried on the next change");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_wait_for_the_apps_and_the_later_sidecars() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "initContainers": [
                {"name": "init", "image": "i"},
                {"name": "proxy", "image": "i", "restartPolicy": "Always"},
                {"name": "logger", "image": "i", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "app", "image": "i"}, {"name": "worker", "image": "i"}],
        }))
        .expect("spec");
        let order = TerminationOrder::new(Some(&spec), &["proxy", "logger", "app", "worker"]);
        let (app_waits, app) = order.turn("app");
        assert!(app_waits.is_empty(), "app containers stop at once");
        let (logger_waits, logger) = order.turn("logger");
        assert_eq!(
            logger_waits.len(),
            2,
            "the last sidecar waits for both apps"
        );
        let (proxy_waits, _) = order.turn("proxy");
        assert_eq!(
            proxy_waits.len(),
            3,
            "an earlier sidecar also waits for the later one"
        );
        app.cancel();
        order.turn("worker").1.cancel();
        assert!(logger_waits.iter().all(CancellationToken::is_cancelled));
        assert!(!proxy_waits.iter().all(CancellationToken::is_cancelled));
        logger.cancel();
        assert!(proxy_waits.iter().all(CancellationToken::is_cancelled));
    }
}
