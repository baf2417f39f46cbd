//! One task per pod (kubelet: `podWorkers`), running the pod's explicit lifecycle
//! ([`state::PodState`]). Each wake-up is a sync: observe Docker, take the next step of the
//! lifecycle, report the status. Wake-ups come from the dispatcher (pod changes, PLEG
//! events, probe results, configmap/secret changes), from back-off timers, and every
//! [`RESYNC`] as a safety net.
//!
//! # Layout
//! - `state`: the lifecycle states and per-container state (back-off kept there). Deletion,
//!   rejection at admission and eviction are states of the lifecycle, not flags beside it.
//! - `lifecycle`: moving between those states; admission and deletion.
//! - `deadline`: `activeDeadlineSeconds` (eviction).
//! - `backoff`: crash-loop / pull back-off.
//! - `observe`: what Docker holds for the pod.
//! - `sync`: one sync step (sandbox, volumes, init containers, app containers).
//! - `own_network`: pods without a sandbox, whose one container holds the pod's network.
//! - `start`: starting one container (image, env, binds, create, start).
//! - `image_volumes`: pulling the images of image volumes, and how they reach a container.
//! - `terminate`: graceful termination, deletion report, orphan clean-up.
//! - `events`: the kubelet's pod and container events.
//! - `refresh`: preparing and re-writing volumes (object changes, token expiry).
//! - `report`: building and sending the status.
//! - `resize`: in-place resize: allocation, actuation, status ([`crate::resize`]).
//! - `trace`: which syncs continue the trace of the change that caused them.

pub(crate) mod backoff;
mod deadline;
mod events;
mod hooks;
mod image_volumes;
mod lifecycle;
pub(crate) mod observe;
mod own_network;
mod refresh;
mod report;
mod resize;
pub(crate) mod start;
pub(crate) mod state;
mod sync;
mod terminate;
#[cfg(test)]
mod tests;
mod trace;
#[cfg(test)]
mod trace_tests;

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod image_volume_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod own_network_tests;
#[cfg(test)]
mod resize_tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info_span, warn};
use verge_core::{ResourceKey, TraceContext};

use super::Context;
use super::probe::{ProbeKind, ProbeUpdate};
use super::status::build::ImageIds;
use state::{ContainerTrack, PodState};
pub(crate) use terminate::cleanup_orphan;
use verge_container_runtime::ContainerRuntime;
use verge_runtime::ErrorChain;

/// Longest time between two syncs of a pod.
pub const RESYNC: Duration = Duration::from_secs(10);

/// Delay before retrying a sync that failed (e.g. Docker unreachable).
const RETRY: Duration = Duration::from_secs(2);

/// What the dispatcher tells a worker.
#[derive(Debug)]
pub(crate) enum WorkerMsg {
    /// A newer version of the pod (e.g. deletionTimestamp set), with the trace context of
    /// its commit.
    Update(Arc<Pod>, TraceContext),
    /// The pod left the store (cloud delete, or replaced by a new uid).
    Deleted,
    /// PLEG saw a container change.
    Relist,
    /// A probe result changed.
    Probe(ProbeUpdate),
    /// A probe attempt failed, or succeeded with a warning (for the `Unhealthy` or
    /// `ProbeWarning` event).
    Unhealthy(ProbeUpdate),
    /// A configmap/secret the pod mounts changed.
    Refresh,
}

/// The dispatcher's end of a worker. Messages are coalesced by the worker (each wake-up
/// drains the queue); their number is bounded by the event sources' rates.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub key: ResourceKey,
    /// The newest version, shared with the worker (one copy per pod).
    pub pod: Arc<Pod>,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    /// The newest `deletionGracePeriodSeconds`, read by a worker busy terminating.
    deletion_grace: watch::Sender<Option<i64>>,
}

impl WorkerHandle {
    pub(crate) fn send(&self, msg: WorkerMsg) {
        let _ = self.tx.send(msg);
    }

    /// Hands the worker a newer version of its pod, committed in trace `trace`.
    pub(crate) fn update(&mut self, pod: Pod, trace: TraceContext) {
        if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
            self.deletion_grace.send_replace(Some(grace));
        }
        let pod = Arc::new(pod);
        self.pod = Arc::clone(&pod);
        self.send(WorkerMsg::Update(pod, trace));
    }
}

/// One pod's worker.
pub(crate) struct Worker<R: ContainerRuntime> {
    ctx: Arc<Context<R>>,
    key: ResourceKey,
    uid: String,
    pod: Arc<Pod>,
    state: PodState,
    tracks: HashMap<String, ContainerTrack>,
    volumes: Option<super::volumes::PodVolumes>,
    /// Volumes set up beside the sandbox's creation (they do not depend on it), for the next
    /// [`Worker::ensure_volumes`] to take.
    prepared: Option<super::volumes::Result<super::volumes::PodVolumes>>,
    refresh_volumes: bool,
    /// The images of the image volumes as this sync pulled them ([`image_volumes`]); `None`
    /// until a container mounting one starts in the sync.
    image_volume_pulls: Option<Arc<image_volumes::ImageVolumePulls>>,
    /// No token refresh before this (the last one could not renew a due token).
    token_retry: Option<Instant>,
    image_ids: ImageIds,
    /// Termination messages of exited instances, by container id (read once each).
    termination_messages: HashMap<String, String>,
    last_status: Option<PodStatus>,
    start_time: Time,
    /// When this worker started a pod not yet Running, until its status first says Running
    /// (`verge_edgecore_pod_start_duration_seconds{stage="total"}`).
    starting_since: Option<std::time::Instant>,
    /// The pod's IP on the bridge: its sandbox's, or that of its container holding the pod's
    /// network (kept while they are stopped, e.g. after completion); see [`Worker::pod_ip`].
    sandbox_ip: Option<String>,
    /// The trace the next syncs continue.
    trace: trace::SyncTrace,
    /// The newest `deletionGracePeriodSeconds` the dispatcher saw (a termination in progress
    /// starts over when it shrinks).
    deletion_grace: watch::Receiver<Option<i64>>,
    /// In-place resize: the allocation and the pod as the cloud wants it ([`resize`]).
    resize: resize::ResizeState,
    /// The pod's share of the node while it is admitted and active ([`crate::admission`]).
    admission: Option<crate::admission::Ticket>,
    /// Held by hold-upgrade: not admitted, nothing started, until an update of the pod no
    /// longer asks for the hold ([`crate::hold`]).
    held: bool,
}

/// The spec of `pod`; an empty one for a pod without (none reaches a worker: the API server
/// requires one).
fn spec_of(pod: &Pod) -> &PodSpec {
    static NONE: std::sync::LazyLock<PodSpec> = std::sync::LazyLock::new(PodSpec::default);
    pod.spec.as_ref().unwrap_or(&NONE)
}

/// Starts the worker of `pod` (stored at `key`, committed in trace `trace`; `held` by
/// hold-upgrade); it reports its uid on `done` when it ends.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn<R: ContainerRuntime>(
    ctx: Arc<Context<R>>,
    key: ResourceKey,
    pod: Pod,
    trace: TraceContext,
    held: bool,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
    done: mpsc::UnboundedSender<String>,
) -> WorkerHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let pod = Arc::new(pod);
    let mut worker = Worker::new(ctx, key.clone(), Arc::clone(&pod));
    let (deletion_grace, grace_rx) = watch::channel(pod.metadata.deletion_grace_period_seconds);
    worker.deletion_grace = grace_rx;
    worker.trace.follow(trace);
    worker.held = held;
    let uid = worker.uid.clone();
    let span = info_span!("pod", pod = %key, %uid);
    tracker.spawn(
        async move {
            worker.run(rx, shutdown).await;
            let _ = done.send(uid);
        }
        .instrument(span),
    );
    WorkerHandle {
        key,
        pod,
        tx,
        deletion_grace,
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// The worker of `pod` (stored at `key`), before its first sync.
    fn new(ctx: Arc<Context<R>>, key: ResourceKey, pod: Arc<Pod>) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .unwrap_or_else(|| Time(verge_edge_store::clock::now()));
        // A pod already reported terminal is not run again (kubelet: terminal pods are skipped).
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let state = PodState::initial(phase);
        // A pod restored as admitted at start-up is not admitted again.
        let admission = state
            .is_active()
            .then(|| ctx.admitted.claim(&uid))
            .flatten();
        let starting = matches!(phase, None | Some("Pending"));
        let resize = resize::ResizeState::new(&pod);
        let pod_grace = pod.metadata.deletion_grace_period_seconds;
        Self {
            ctx,
            key,
            uid,
            pod,
            state,
            tracks: HashMap::new(),
            volumes: None,
            prepared: None,
            refresh_volumes: false,
            image_volume_pulls: None,
            token_retry: None,
            image_ids: ImageIds::new(),
            termination_messages: HashMap::new(),
            last_status: None,
            start_time,
            starting_since: starting.then(std::time::Instant::now),
            sandbox_ip: None,
            trace: trace::SyncTrace::default(),
            // Replaced by `spawn` with the receiving end of its handle's channel.
            deletion_grace: watch::channel(pod_grace).1,
            resize,
            admission,
            held: false,
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<WorkerMsg>,
        shutdown: CancellationToken,
    ) {
        loop {
            // Boxed: the sync's state (Docker calls, volume set-up) lives on the heap only while
            // it runs, so an idle worker holds a few hundred bytes, not the ~19 KiB of a
            // sync's future (heaptrack on `cargo xtask bench pod-startup`).
            let wake = Box::pin(self.traced_sync()).await;
            if self.state == PodState::Terminated {
                debug!("pod worker done");
                return;
            }
            let deadline = wake
                .unwrap_or_else(|| Instant::now() + RESYNC)
                .min(Instant::now() + RESYNC);
            tokio::select! {
                () = shutdown.cancelled() => return,
                msg = rx.recv() => {
                    let Some(msg) = msg else { return };
                    self.apply(msg);
                    while let Ok(msg) = rx.try_recv() {
                        self.apply(msg);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// One sync, in an `edged.sync` span while a change is being applied ([`trace`]);
    /// returns when to run again (soon after a failure).
    async fn traced_sync(&mut self) -> Option<Instant> {
        let span = self.trace.sync_span(&self.key, &self.uid);
        let wake = match self.sync().instrument(span.clone()).await {
            Ok(wake) => wake,
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                span.in_scope(|| warn!(error = %ErrorChain(&e), "pod sync failed; retrying"));
                Some(Instant::now() + RETRY)
            }
        };
        let phase = self.last_status.as_ref().and_then(|s| s.phase.as_deref());
        if phase.is_some_and(|p| p != "Pending") {
            self.trace.settled();
        }
        wake
    }

    /// Records a message; the next sync acts on it.
    fn apply(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Update(pod, trace) => {
                self.trace.follow(trace);
                // downwardAPI volumes show labels and annotations (kubelet: volume remount).
                let (old, new) = (&self.pod.metadata, &pod.metadata);
                if old.labels != new.labels || old.annotations != new.annotations {
                    self.refresh_volumes = true;
                }
                if self.held && !crate::hold::asks(&pod) {
                    tracing::info!("hold-upgrade released: the pod starts");
                    self.held = false;
                }
                self.pod = pod;
            }
            WorkerMsg::Deleted => self.delete(),
            WorkerMsg::Relist => {}
            WorkerMsg::Refresh => self.refresh_volumes = true,
            WorkerMsg::Unhealthy(u) => self.probe_event(&u),
            WorkerMsg::Probe(u) => {
                if !u.success
                    && matches!(u.kind, ProbeKind::Liveness | ProbeKind::Startup)
                    && let Some(t) = self.tracks.get_mut(&u.container)
                {
                    t.request_kill(u.container_id.clone(), u.kind);
                }
            }
        }
    }

    /// The grace period of a deletion: `deletionGracePeriodSeconds`, else the spec's
    /// `terminationGracePeriodSeconds`, else 30 s.
    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    /// The pod's IP: the node's for hostNetwork pods, else the one on the bridge (the
    /// sandbox's, or that of the container holding the pod's network).
    fn pod_ip(&self) -> Option<String> {
        if super::spec::host_network(&self.pod) {
            self.ctx.node_ip.map(|ip| ip.to_string())
        } else {
            self.sandbox_ip.clone()
        }
    }

    fn track(&mut self, name: &str) -> &mut ContainerTrack {
        let (i, m) = (
            self.ctx.config.edged.crash_loop_back_off.initial_delay,
            self.ctx
                .config
                .edged
                .crash_loop_back_off
                .max_container_restart_period,
        );
        self.tracks
            .entry(name.to_owned())
            .or_insert_with(|| ContainerTrack::new(i, m))
    }
}
