//! Routes what happens to the pod workers (the kubelet's `syncLoop`): store changes from
//! metamanager, PLEG events, probe results, and workers that finished. Starts a worker per
//! pod uid, and cleans up the containers of pods that are no longer in the store (orphans).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use verge_core::{ResourceKey, ResourceType, TraceContext};

use super::Context;
use super::pleg::PodChanged;
use super::pod_worker::{self, WorkerHandle, WorkerMsg};
use super::probe::ProbeUpdate;
use crate::Result;
use verge_container_runtime::labels::ContainerLabels;
use verge_container_runtime::{ContainerRuntime, ListFilter};
use verge_metamanager::{Applied, StoreEvent};
use verge_runtime::ErrorChain;

/// The dispatcher; see the module docs.
pub(crate) struct Dispatcher<R: ContainerRuntime> {
    ctx: Arc<Context<R>>,
    events: broadcast::Receiver<StoreEvent>,
    pleg: mpsc::Receiver<PodChanged>,
    probes: broadcast::Receiver<ProbeUpdate>,
    failures: broadcast::Receiver<ProbeUpdate>,
    live: watch::Sender<HashSet<String>>,
    workers: HashMap<String, WorkerHandle>,
    by_key: HashMap<ResourceKey, String>,
    orphans: HashSet<String>,
    done_tx: mpsc::UnboundedSender<String>,
    done_rx: mpsc::UnboundedReceiver<String>,
    tracker: TaskTracker,
}

impl<R: ContainerRuntime> Dispatcher<R> {
    pub(crate) fn new(
        ctx: Arc<Context<R>>,
        events: broadcast::Receiver<StoreEvent>,
        pleg: mpsc::Receiver<PodChanged>,
        probes: (
            broadcast::Receiver<ProbeUpdate>,
            broadcast::Receiver<ProbeUpdate>,
        ),
        live: watch::Sender<HashSet<String>>,
    ) -> Self {
        let (probes, failures) = probes;
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            ctx,
            events,
            pleg,
            probes,
            failures,
            live,
            workers: HashMap::new(),
            by_key: HashMap::new(),
            orphans: HashSet::new(),
            done_tx,
            done_rx,
            tracker: TaskTracker::new(),
        }
    }

    /// Runs until `shutdown`; then waits for the workers (which leave containers running).
    pub(crate) async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        self.resync(&shutdown, true).await;
        let mut events_open = true;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                ev = self.events.recv(), if events_open => match ev {
                    Ok(ev) => self.on_store_event(ev, &shutdown).await,
                    Err(RecvError::Lagged(n)) => {
                        warn!(missed = n, "store events lagged; relisting pods");
                        self.resync(&shutdown, false).await;
                    }
                    Err(RecvError::Closed) => events_open = false,
                },
                Some(changed) = self.pleg.recv() => self.on_pleg(changed),
                update = self.probes.recv() => match update {
                    Ok(u) => self.send(&u.pod_uid.clone(), WorkerMsg::Probe(u)),
                    Err(RecvError::Lagged(_)) => {
                        for w in self.workers.values() { w.send(WorkerMsg::Relist); }
                    }
                    Err(RecvError::Closed) => {}
                },
                failed = self.failures.recv() => if let Ok(u) = failed {
                    self.send(&u.pod_uid.clone(), WorkerMsg::Unhealthy(u));
                },
                Some(uid) = self.done_rx.recv() => {
                    self.orphans.remove(&uid);
                    if let Some(w) = self.workers.remove(&uid) {
                        if self.by_key.get(&w.key) == Some(&uid) {
                            self.by_key.remove(&w.key);
                        }
                        self.publish_live();
                        // The store may hold a newer pod under the same name by now.
                        self.load(w.key, TraceContext::default(), &shutdown).await;
                    }
                }
            }
        }
        self.tracker.close();
        self.tracker.wait().await;
        Ok(())
    }

    /// Syncs every pod of the store (at `startup` and after lagging): starts missing workers,
    /// oldest pod first (kubelet: `HandlePodAdditions` sorts by creation time), updates the
    /// others, deletes workers whose pod is gone. At start-up, the pods admitted before the
    /// restart are [restored](crate::admission::admitted) as admitted before any worker
    /// starts.
    async fn resync(&mut self, shutdown: &CancellationToken, startup: bool) {
        let stored = match self.ctx.store.blocking(|s| s.list(ResourceType::Pod)).await {
            Ok(p) => p,
            Err(e) => return warn!(error = %ErrorChain(&e), "cannot list stored pods"),
        };
        let keys: HashSet<ResourceKey> = stored.iter().map(|(k, _)| k.clone()).collect();
        let mut pods = Vec::with_capacity(stored.len());
        for (key, obj) in stored {
            match serde_json::from_slice::<Pod>(&obj.content) {
                Ok(pod) => pods.push((key, pod)),
                Err(e) => warn!(%key, error = %e, "stored pod is not a v1.Pod; ignored"),
            }
        }
        pods.sort_by(|(_, a), (_, b)| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b))
        });
        let ran = if startup {
            self.restore_admitted(&pods).await
        } else {
            HashSet::new()
        };
        // hold-upgrade beside every stored pod, whatever the order of their creation times
        // (whole seconds: an update's pod may share its predecessor's), never for a pod that
        // ran before the restart.
        let held: HashSet<String> = pods
            .iter()
            .filter(|(_, p)| {
                p.metadata.uid.as_ref().is_some_and(|u| !ran.contains(u))
                    && crate::hold::held(p, pods.iter().map(|(_, o)| o))
            })
            .filter_map(|(_, p)| p.metadata.uid.clone())
            .collect();
        for (key, pod) in pods {
            let is_held = pod.metadata.uid.as_ref().is_some_and(|u| held.contains(u));
            self.upsert(key, pod, TraceContext::default(), shutdown, Some(is_held));
        }
        let gone: Vec<String> = self
            .by_key
            .iter()
            .filter(|(k, _)| !keys.contains(*k))
            .map(|(_, u)| u.clone())
            .collect();
        for uid in gone {
            self.send(&uid, WorkerMsg::Deleted);
        }
        // Pods deleted while edgecore was down and without containers left are seen by no
        // one else: remove their directories (kubelet: `cleanupOrphanedPodDirs`).
        let live: HashSet<String> = self
            .workers
            .keys()
            .chain(self.orphans.iter())
            .cloned()
            .collect();
        let ctx = Arc::clone(&self.ctx);
        self.tracker
            .spawn(async move { ctx.volumes.cleanup_orphaned_dirs(&live).await });
    }

    /// Registers as admitted the stored `pods` that ran on the node before edgecore
    /// restarted ([`crate::admission::ran_before`]: containers of theirs exist, or their
    /// status says Running), so that no pod admitted before is rejected for the others;
    /// returns their uids.
    async fn restore_admitted(&self, pods: &[(ResourceKey, Pod)]) -> HashSet<String> {
        let with_containers: HashSet<String> =
            match self.ctx.runtime.list(&ListFilter::node()).await {
                Ok(containers) => containers
                    .iter()
                    .filter_map(|c| ContainerLabels::parse(&c.labels))
                    .map(|l| l.pod.uid)
                    .collect(),
                Err(e) => {
                    let error = ErrorChain(&e);
                    warn!(%error, "cannot list containers; admitted pods restored by status only");
                    HashSet::new()
                }
            };
        let ran: Vec<&Pod> = pods
            .iter()
            .map(|(_, p)| p)
            .filter(|p| crate::admission::ran_before(p, &with_containers))
            .collect();
        let uids = ran.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        self.ctx.admitted.restore(ran);
        uids
    }

    async fn on_store_event(&mut self, ev: StoreEvent, shutdown: &CancellationToken) {
        match ev.key.kind {
            ResourceType::Pod => {
                if ev.applied == Applied::Deleted {
                    if let Some(uid) = self.by_key.get(&ev.key).cloned()
                        && (ev.uid.is_empty() || ev.uid == uid)
                    {
                        self.send(&uid, WorkerMsg::Deleted);
                    }
                } else {
                    self.load(ev.key, ev.trace, shutdown).await;
                }
            }
            ResourceType::ConfigMap | ResourceType::Secret => {
                for w in self.workers.values() {
                    if uses(&w.pod, ev.key.kind, &ev.key.namespace, &ev.key.name) {
                        w.send(WorkerMsg::Refresh);
                    }
                }
            }
            _ => {}
        }
    }

    /// Reads pod `key` (committed in trace `trace`) from the store and hands it to its
    /// worker.
    async fn load(&mut self, key: ResourceKey, trace: TraceContext, shutdown: &CancellationToken) {
        let k = key.clone();
        match self.ctx.store.blocking(move |s| s.get(&k)).await {
            Ok(Some(obj)) => match serde_json::from_slice::<Pod>(&obj.content) {
                Ok(pod) => self.upsert(key, pod, trace, shutdown, None),
                Err(e) => warn!(%key, error = %e, "stored pod is not a v1.Pod; ignored"),
            },
            Ok(None) => {}
            Err(e) => warn!(%key, error = %ErrorChain(&e), "cannot read pod"),
        }
    }

    /// Hands `pod` to its worker, or starts one: `held` by hold-upgrade as given, or (`None`)
    /// as decided beside the pods of the running workers.
    fn upsert(
        &mut self,
        key: ResourceKey,
        pod: Pod,
        trace: TraceContext,
        shutdown: &CancellationToken,
        held: Option<bool>,
    ) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return warn!(%key, "pod without uid; ignored");
        };
        if let Some(old) = self.by_key.get(&key).cloned()
            && old != uid
        {
            // Same name, new incarnation: the old one goes away, the new one starts.
            self.send(&old, WorkerMsg::Deleted);
        }
        if let Some(w) = self.workers.get_mut(&uid) {
            w.update(pod, trace);
        } else {
            // hold-upgrade is decided once; the worker releases the pod when an update no
            // longer asks for the hold.
            let held = held.unwrap_or_else(|| {
                crate::hold::held(&pod, self.workers.values().map(|w| w.pod.as_ref()))
            });
            if held {
                info!(%key, %uid, "hold-upgrade: an older revision runs; the pod waits for its release");
            }
            debug!(%key, %uid, "starting pod worker");
            let w = pod_worker::spawn(
                Arc::clone(&self.ctx),
                key.clone(),
                pod,
                trace,
                held,
                &self.tracker,
                shutdown.child_token(),
                self.done_tx.clone(),
            );
            self.workers.insert(uid.clone(), w);
            self.publish_live();
        }
        self.by_key.insert(key, uid);
    }

    fn on_pleg(&mut self, changed: PodChanged) {
        if self.workers.contains_key(&changed.pod.uid) {
            self.send(&changed.pod.uid, WorkerMsg::Relist);
        } else if changed.has_containers && self.orphans.insert(changed.pod.uid.clone()) {
            let (ctx, done) = (Arc::clone(&self.ctx), self.done_tx.clone());
            self.tracker.spawn(async move {
                let uid = changed.pod.uid.clone();
                pod_worker::cleanup_orphan(&ctx, &changed.pod).await;
                let _ = done.send(uid);
            });
        }
    }

    fn send(&self, uid: &str, msg: WorkerMsg) {
        if let Some(w) = self.workers.get(uid) {
            w.send(msg);
        }
    }

    fn publish_live(&self) {
        self.live
            .send_replace(self.workers.keys().cloned().collect());
    }
}

/// Whether `pod` mounts configmap or secret `ns/name` (directly or projected).
fn uses(pod: &Pod, kind: ResourceType, ns: &str, name: &str) -> bool {
    if pod.metadata.namespace.as_deref().unwrap_or("default") != ns {
        return false;
    }
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| match kind {
        ResourceType::ConfigMap => {
            v.config_map.as_ref().is_some_and(|c| c.name == name)
                || v.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.config_map.as_ref().is_some_and(|c| c.name == name))
                })
        }
        ResourceType::Secret => {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name))
                || v.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.secret.as_ref().is_some_and(|c| c.name == name))
                })
        }
        _ => false,
    })
}
