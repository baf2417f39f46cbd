//! The status manager (kubelet: `status.Manager`): pod workers hand it the `v1.PodStatus` they
//! [built](build::pod_status); it reports `update <ns>/podstatus/<name>` (header uid = the
//! pod's uid) through edgehub only when the status differs from the last one reported for
//! that pod, ignoring condition timestamps. It also reports completed deletions as
//! `delete <ns>/pod/<name>` (header uid), after the pod's last status (docs/protocol.md).
//! Both are durable reports ([`EdgeHubHandle::report`]): committed to the outbox under
//! [`OutboxKey::PodStatus`](verge_edge_store::OutboxKey::PodStatus) (only the newest status of a pod waits) and
//! [`OutboxKey::PodDelete`](verge_edge_store::OutboxKey::PodDelete), and sent until the cloud acks them.

pub mod build;
pub mod container;
pub mod terminal;

use std::collections::HashMap;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};
use verge_core::{
    Envelope, Group, Kind, Module, ObjectVersion, ResourceKey, ResourceType, TraceContext, Write,
};

use crate::{Error, Result};
use verge_edgehub::EdgeHubHandle;
use verge_runtime::ErrorChain;

/// Source module of edged's reports.
pub const SOURCE: &str = "edged";

/// Capacity of the queue from pod workers to the status manager.
const QUEUE: usize = 1024;

/// A report from a pod worker.
#[derive(Debug)]
enum Report {
    Status {
        pod: ResourceKey,
        uid: String,
        status: Box<PodStatus>,
        /// The context of the sync that observed it (its report continues that trace).
        trace: TraceContext,
    },
    Deleted {
        pod: ResourceKey,
        uid: String,
        trace: TraceContext,
    },
}

/// Where pod workers send statuses; cheap to clone.
#[derive(Debug, Clone)]
pub struct StatusHandle {
    tx: mpsc::Sender<Report>,
}

impl StatusHandle {
    /// Offers the current status of pod `pod` (its `<ns>/pod/<name>` key) with `uid`; the
    /// report carries the trace context of the current span (the pod's sync).
    /// Waits while the queue is full.
    pub async fn update(&self, pod: &ResourceKey, uid: &str, status: PodStatus) {
        let report = Report::Status {
            pod: pod.clone(),
            uid: uid.to_owned(),
            status: Box::new(status),
            trace: verge_telemetry::propagation::inject_current(),
        };
        let _ = self.tx.send(report).await;
    }

    /// Reports that pod `pod`/`uid` is gone from this node (containers removed).
    pub async fn deleted(&self, pod: &ResourceKey, uid: &str) {
        let _ = self
            .tx
            .send(Report::Deleted {
                pod: pod.clone(),
                uid: uid.to_owned(),
                trace: verge_telemetry::propagation::inject_current(),
            })
            .await;
    }
}

/// The status manager task; see the module docs.
#[derive(Debug)]
pub struct StatusManager {
    rx: mpsc::Receiver<Report>,
    hub: EdgeHubHandle,
    /// Last reported status per pod uid, without condition timestamps.
    last: HashMap<String, PodStatus>,
}

impl StatusManager {
    /// A manager reporting through `hub`, and the handle its workers use.
    pub fn new(hub: EdgeHubHandle) -> (StatusHandle, Self) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            StatusHandle { tx },
            Self {
                rx,
                hub,
                last: HashMap::new(),
            },
        )
    }

    /// Reports until `shutdown` or until every handle is dropped.
    ///
    /// # Errors
    /// None: encoding and outbox failures are logged.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        loop {
            let report = tokio::select! {
                () = shutdown.cancelled() => break,
                r = self.rx.recv() => match r { Some(r) => r, None => break },
            };
            let (msg, uid) = match report {
                Report::Status {
                    pod,
                    uid,
                    status,
                    trace,
                } => {
                    let normalized = normalize(&status);
                    if self.last.get(&uid) == Some(&normalized) {
                        continue;
                    }
                    let key = ResourceKey::new(&pod.namespace, ResourceType::PodStatus, &pod.name);
                    let content = match serde_json::to_vec(&status) {
                        Ok(c) => c,
                        Err(source) => {
                            warn!(error = %Error::Encode { what: "pod status", source }, "status not reported");
                            continue;
                        }
                    };
                    debug!(pod = %pod, phase = ?status.phase, "reporting pod status");
                    self.last.insert(uid.clone(), normalized);
                    let kind = Kind::Upsert {
                        write: Write::Update,
                        key,
                        version: ObjectVersion::uid(&uid),
                    };
                    (upstream(kind, content, trace), uid)
                }
                Report::Deleted { pod, uid, trace } => {
                    self.last.remove(&uid);
                    debug!(pod = %pod, "reporting pod deletion");
                    let kind = Kind::Delete {
                        key: pod,
                        version: ObjectVersion::uid(&uid),
                    };
                    (upstream(kind, Vec::new(), trace), uid)
                }
            };
            let what = msg.to_string();
            if let Err(e) = self.hub.report(msg).await {
                // A store failure: forget the status so the pod's next one is reported.
                error!(report = %what, error = %ErrorChain(&e), "pod report not stored");
                self.last.remove(&uid);
                if matches!(e, verge_edgehub::Error::HubStopped) {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// An upstream message of edged's (pod status and deletion, events, node registration,
/// status and lease — the kubelet's reports): group `resource`, source `edged` ([`SOURCE`]),
/// a fresh id, `content` the object's JSON, `trace` the context of the work it reports (a
/// pod's `edged.sync` span; empty when not traced).
fn upstream(kind: Kind, content: Vec<u8>, trace: TraceContext) -> Envelope {
    let mut message = Envelope::new(Module::Edged, Group::Resource, kind, content);
    message.trace = trace;
    message
}

/// An upstream `write` of the object at `key` (no uid or resourceVersion), see [`upstream`].
pub(crate) fn report(write: Write, key: &ResourceKey, content: Vec<u8>) -> Envelope {
    let kind = Kind::Upsert {
        write,
        key: key.clone(),
        version: ObjectVersion::default(),
    };
    upstream(kind, content, TraceContext::default())
}

/// The status without the timestamps that change on their own (condition probe/transition
/// times), for change detection.
fn normalize(status: &PodStatus) -> PodStatus {
    let mut s = status.clone();
    for c in s.conditions.iter_mut().flatten() {
        c.last_probe_time = None;
        c.last_transition_time = None;
    }
    s
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodCondition;
    use verge_core::Operation;
    use verge_proto::{Message, MessageExt as _};

    use super::*;

    #[tokio::test]
    async fn reports_only_changes_then_the_deletion() {
        let (hub, mut up) = EdgeHubHandle::detached(8);
        let (handle, manager) = StatusManager::new(hub);
        let stop = CancellationToken::new();
        let task = tokio::spawn(manager.run(stop.clone()));
        let key = ResourceKey::new("ns", ResourceType::Pod, "web");
        let status = |phase: &str, t: i64| PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(t).expect("ts"),
                )),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        };
        handle.update(&key, "u1", status("Pending", 1)).await;
        handle.update(&key, "u1", status("Pending", 2)).await;
        handle.update(&key, "u1", status("Running", 3)).await;
        handle.deleted(&key, "u1").await;
        let mut got = Vec::new();
        for _ in 0..3 {
            let m = Message::from(up.recv().await.expect("message"));
            let uid = m.header.as_ref().map(|h| h.uid.clone()).unwrap_or_default();
            got.push((m.operation().expect("op"), m.resource().to_owned(), uid));
        }
        assert_eq!(
            got[0],
            (Operation::Update, "ns/podstatus/web".into(), "u1".into())
        );
        assert_eq!(got[1].0, Operation::Update);
        assert_eq!(
            got[2],
            (Operation::Delete, "ns/pod/web".into(), "u1".into())
        );
        stop.cancel();
        task.await.expect("join").expect("run");
    }
}
