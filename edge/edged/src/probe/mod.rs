//! Container probes: liveness, readiness and startup, following the kubelet's prober
//! (`pkg/kubelet/prober`: `prober_manager.go`, `worker.go`, `results_manager.go`).
//!
//! # Layout
//! - [`ProbeManager`] (this file): one task per (pod uid, container name, probe kind), the
//!   current results, and a broadcast of their changes ([`ProbeUpdate`]).
//! - `results`: the current results per container and the publishing of changes.
//! - `worker`: the per-probe loop: initial delay, period, timeout, success/failure thresholds,
//!   startup gating.
//! - `handler`: how one probe attempt runs ([`ProbeHandler`]); [`DockerProber`] runs `exec`
//!   through Docker, `httpGet` with a hyper client (HTTP or HTTPS), `tcpSocket` with a TCP
//!   connect and `grpc` with a health check.
//! - `tls`: the TLS client configuration of HTTPS probes (no certificate verification, as the
//!   kubelet's `InsecureSkipVerify`).
//! - `grpc`: the `grpc.health.v1.Health/Check` call of gRPC probes.
//! - `error`: [`ProbeError`], why an attempt failed (its message is the probe's output).
//!
//! # Results (kubelet semantics)
//! - **startup**: not started until its first success; while not started, liveness and
//!   readiness are not probed. Without a startup probe the container counts as started as soon
//!   as it is [added](ProbeManager::add). After the success the startup probe stops.
//! - **readiness**: false until the probe has succeeded `successThreshold` times in a row;
//!   without a readiness probe, ready = started.
//! - **liveness**: true until it has failed `failureThreshold` times in a row.
//! - A liveness or startup failure is published (`success: false`) and its worker then holds
//!   (stops probing): the subscriber (edged's pod worker) must restart the container, then
//!   [`add`](ProbeManager::add) it again with the new container id.

mod error;
mod grpc;
mod handler;
mod http;
mod results;
mod tls;
mod worker;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

pub use error::ProbeError;
pub use handler::{DockerProber, ProbeHandler, ProbeOutcome};

use results::{Entry, Key, Shared};
use verge_container_runtime::ContainerRuntime;

/// The `User-Agent` of HTTP and gRPC probes (kubelet: `kube-probe/<major>.<minor>`).
const USER_AGENT: &str = "kube-probe/1.37";

/// Capacity of the [`ProbeUpdate`] broadcast; a subscriber that lags further loses the oldest
/// updates (`RecvError::Lagged`) and should re-read [`ProbeManager::ready`]/`started`.
pub const UPDATE_CAPACITY: usize = 256;

/// The three kinds of probe of a Kubernetes container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// `livenessProbe`: failure means the container must be restarted.
    Liveness,
    /// `readinessProbe`: decides the container's (and the pod's) `ready` condition.
    Readiness,
    /// `startupProbe`: gates liveness and readiness until it has succeeded once; failure means
    /// the container must be restarted.
    Startup,
}

impl ProbeKind {
    /// Every kind, in the order used for indexing results.
    pub const ALL: [ProbeKind; 3] = [Self::Liveness, Self::Readiness, Self::Startup];

    /// The kind's name as the kubelet spells it in events: `Liveness`, `Readiness`, `Startup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Liveness => "Liveness",
            Self::Readiness => "Readiness",
            Self::Startup => "Startup",
        }
    }

    /// The container's probe of this kind, if any.
    pub fn probe_of(self, container: &Container) -> Option<&Probe> {
        match self {
            Self::Liveness => container.liveness_probe.as_ref(),
            Self::Readiness => container.readiness_probe.as_ref(),
            Self::Startup => container.startup_probe.as_ref(),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The running container a probe is aimed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// `metadata.namespace` of the pod.
    pub namespace: String,
    /// `metadata.name` of the pod.
    pub pod: String,
    /// `metadata.uid` of the pod.
    pub pod_uid: String,
    /// The container's name in the pod spec.
    pub container: String,
    /// The Docker container id (`exec` probes run in it).
    pub container_id: String,
    /// The pod's IP: the default host of `httpGet` and `tcpSocket` probes.
    pub pod_ip: Option<String>,
}

/// A change of a probe result, after thresholds (kubelet: `results.Update`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// `metadata.uid` of the pod.
    pub pod_uid: String,
    /// The container's name in the pod spec.
    pub container: String,
    /// The Docker container id the result is about (ignore updates for an older container).
    pub container_id: String,
    /// Which probe.
    pub kind: ProbeKind,
    /// The new result: for liveness/startup `false` means "restart the container".
    pub success: bool,
    /// Why the last attempt failed (empty on success), e.g. `HTTP probe failed with
    /// statuscode: 500`.
    pub message: String,
}

/// Runs the probes of every container of edged's pods (kubelet: `prober.Manager`).
///
/// Cheap to clone (shared state). Tasks are spawned on the current Tokio runtime, so
/// [`add`](Self::add) must be called from within one. Every task ends when its container is
/// removed ([`remove_container`](Self::remove_container), [`remove_pod`](Self::remove_pod)),
/// replaced (another `add`), or on [`shutdown`](Self::shutdown).
pub struct ProbeManager<H: ProbeHandler = DockerProber> {
    handler: Arc<H>,
    shared: Arc<Shared>,
    root: CancellationToken,
}

impl<H: ProbeHandler> Clone for ProbeManager<H> {
    fn clone(&self) -> Self {
        Self {
            handler: Arc::clone(&self.handler),
            shared: Arc::clone(&self.shared),
            root: self.root.clone(),
        }
    }
}

impl<H: ProbeHandler> fmt::Debug for ProbeManager<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeManager")
            .field("containers", &self.shared.lock().len())
            .finish()
    }
}

impl<R: ContainerRuntime> ProbeManager<DockerProber<R>> {
    /// A manager whose probes run against `runtime` (exec) and the pod network (httpGet,
    /// tcpSocket, grpc).
    pub fn new(runtime: R) -> Self {
        Self::with_handler(DockerProber::new(runtime))
    }
}

impl<H: ProbeHandler> ProbeManager<H> {
    /// A manager whose probe attempts are run by `handler` (tests use a fake).
    pub fn with_handler(handler: H) -> Self {
        let (updates, _) = broadcast::channel(UPDATE_CAPACITY);
        let (failures, _) = broadcast::channel(UPDATE_CAPACITY);
        Self {
            handler: Arc::new(handler),
            shared: Arc::new(Shared {
                entries: Mutex::default(),
                updates,
                failures,
                startup_succeeded: Notify::new(),
            }),
            root: CancellationToken::new(),
        }
    }

    /// The handler that runs probe attempts (and, for [`DockerProber`], lifecycle hooks).
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Starts probing a container that has just started, one task per probe in its spec
    /// (kubelet: `AddPod`). Call it for **every** started container, with or without probes:
    /// a container never added is neither started nor ready. Replaces (and stops) an earlier
    /// entry of the same (pod, container), e.g. after a restart with a new container id.
    pub fn add(&self, target: ProbeTarget, container: &Container) {
        let key: Key = (target.pod_uid.clone(), target.container.clone());
        let cancel = self.root.child_token();
        let entry = Entry {
            cancel: cancel.clone(),
            container_id: target.container_id.clone(),
            has_startup: container.startup_probe.is_some(),
            has_readiness: container.readiness_probe.is_some(),
            results: [Some(true), Some(false), None],
        };
        if let Some(old) = self.shared.lock().insert(key.clone(), entry) {
            old.cancel.cancel();
        }
        let (target, container) = (Arc::new(target), Arc::new(container.clone()));
        for kind in ProbeKind::ALL {
            let Some(probe) = kind.probe_of(&container) else {
                continue;
            };
            let worker = worker::Worker {
                handler: Arc::clone(&self.handler),
                shared: Arc::clone(&self.shared),
                key: key.clone(),
                target: Arc::clone(&target),
                container: Arc::clone(&container),
                timing: worker::Timing::of(probe, kind),
                kind,
                cancel: cancel.clone(),
            };
            verge_runtime::tasks::spawn("probe", worker.run());
        }
    }

    /// Stops the probes of every container of the pod and forgets their results
    /// (kubelet: `RemovePod`).
    pub fn remove_pod(&self, pod_uid: &str) {
        self.shared.lock().retain(|(uid, _), entry| {
            let keep = uid != pod_uid;
            if !keep {
                entry.cancel.cancel();
            }
            keep
        });
    }

    /// Stops the probes of one container and forgets its results (e.g. it exited).
    pub fn remove_container(&self, pod_uid: &str, container: &str) {
        let key = (pod_uid.to_owned(), container.to_owned());
        if let Some(entry) = self.shared.lock().remove(&key) {
            entry.cancel.cancel();
        }
    }

    /// Stops every probe task; later `add`s start nothing.
    pub fn shutdown(&self) {
        self.root.cancel();
        self.shared.lock().clear();
    }

    /// Changes of results from now on. Only changes are sent, never the initial values
    /// (started = false with a startup probe, ready = false, live = true).
    pub fn subscribe(&self) -> broadcast::Receiver<ProbeUpdate> {
        self.shared.updates.subscribe()
    }

    /// Every failed probe attempt from now on, before thresholds (`success: false`; the
    /// kubelet records an `Unhealthy` event for each), and every successful one with a
    /// warning (`success: true`, the warning in `message`; a `ProbeWarning` event each).
    /// Lagging loses the oldest.
    pub fn failures(&self) -> broadcast::Receiver<ProbeUpdate> {
        self.shared.failures.subscribe()
    }

    /// Whether the container is ready: started, and its readiness probe (if any) has
    /// succeeded (kubelet: `UpdatePodStatus`). False for a container not added.
    pub fn ready(&self, pod_uid: &str, container: &str) -> bool {
        let key = (pod_uid.to_owned(), container.to_owned());
        self.shared.lock().get(&key).is_some_and(|e| {
            e.started()
                && (!e.has_readiness || e.results[ProbeKind::Readiness.index()] == Some(true))
        })
    }

    /// Whether the container has started: no startup probe, or it has succeeded. False for a
    /// container not added.
    pub fn started(&self, pod_uid: &str, container: &str) -> bool {
        self.shared
            .started(&(pod_uid.to_owned(), container.to_owned()))
    }

    /// Whether the container was [added](Self::add) (and not removed since).
    pub fn contains(&self, pod_uid: &str, container: &str) -> bool {
        let key = (pod_uid.to_owned(), container.to_owned());
        self.shared.lock().contains_key(&key)
    }
}
