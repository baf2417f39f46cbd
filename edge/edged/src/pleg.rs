//! The pod lifecycle event generator (kubelet: `GenericPLEG`): relists edged's containers
//! every `pleg_relist_period` and right after a Docker `start`/`die`/`oom`/`destroy` event,
//! compares each container's state with the previous relist, and tells the pod workers which
//! pods changed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use verge_container_runtime::labels::{ContainerLabels, PodRef};
use verge_container_runtime::{ContainerRuntime, ListFilter, RuntimeError};
use verge_runtime::ErrorChain;

/// Capacity of the channel to the dispatcher.
pub const CHANNEL_CAPACITY: usize = 256;

/// Delay before re-subscribing to Docker events after the stream ended.
const EVENTS_RETRY: Duration = Duration::from_secs(2);

/// A pod whose containers changed since the previous relist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodChanged {
    /// The pod, from its containers' labels.
    pub pod: PodRef,
    /// Whether Docker still holds containers of it.
    pub has_containers: bool,
}

/// One relist: container id -> (pod, state).
type Snapshot = HashMap<String, (PodRef, String)>;

/// The PLEG task over runtime `R`.
#[derive(Debug)]
pub struct Pleg<R> {
    runtime: R,
    period: Duration,
    out: mpsc::Sender<PodChanged>,
}

impl<R: ContainerRuntime> Pleg<R> {
    /// A PLEG relisting `runtime` every `period`, reporting to `out`.
    pub fn new(runtime: R, period: Duration, out: mpsc::Sender<PodChanged>) -> Self {
        Self {
            runtime,
            period,
            out,
        }
    }

    /// Relists until `shutdown`. The first relist reports every pod that has containers.
    ///
    /// # Errors
    /// None: failed relists are logged and retried.
    pub async fn run(self, shutdown: CancellationToken) -> crate::Result<()> {
        let (kick_tx, mut kick) = mpsc::channel::<()>(1);
        let events = self.runtime.clone();
        let stop = shutdown.clone();
        verge_runtime::tasks::spawn("docker events", async move {
            while !stop.is_cancelled() {
                let mut stream = events.events();
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        ev = stream.next() => match ev {
                            Some(Ok(_)) => { let _ = kick_tx.try_send(()); }
                            Some(Err(e)) => { debug!(error = %ErrorChain(&e), "docker events failed"); break; }
                            None => break,
                        },
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(EVENTS_RETRY) => {}
                }
            }
        });
        let mut previous = Snapshot::new();
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                _ = kick.recv() => {}
            }
            match self.relist().await {
                Ok(current) => {
                    for changed in diff(&previous, &current) {
                        if self.out.send(changed).await.is_err() {
                            return Ok(());
                        }
                    }
                    previous = current;
                }
                Err(e) => warn!(error = %ErrorChain(&e), "relist failed"),
            }
        }
        Ok(())
    }

    async fn relist(&self) -> Result<Snapshot, RuntimeError> {
        let mut snap = Snapshot::new();
        for c in self.runtime.list(&ListFilter::node()).await? {
            let Some(labels) = ContainerLabels::parse(&c.labels) else {
                continue;
            };
            snap.insert(c.id, (labels.pod, c.state));
        }
        Ok(snap)
    }
}

/// The pods with a container added, removed or in another state.
fn diff(previous: &Snapshot, current: &Snapshot) -> Vec<PodChanged> {
    let mut changed: HashMap<&str, &PodRef> = HashMap::new();
    for (id, (pod, state)) in current {
        if previous.get(id).is_none_or(|(_, s)| s != state) {
            changed.insert(&pod.uid, pod);
        }
    }
    for (id, (pod, _)) in previous {
        if !current.contains_key(id) {
            changed.insert(&pod.uid, pod);
        }
    }
    let live: HashSet<&str> = current.values().map(|(p, _)| p.uid.as_str()).collect();
    changed
        .into_values()
        .map(|pod| PodChanged {
            has_containers: live.contains(pod.uid.as_str()),
            pod: pod.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: format!("p-{uid}"),
            uid: uid.into(),
        }
    }

    /// A runtime event triggers a relist at once (the period here is an hour).
    #[tokio::test(start_paused = true)]
    async fn runtime_events_trigger_a_relist() {
        use verge_container_runtime::ContainerSpec;
        use verge_container_runtime::fake::FakeRuntime;

        let rt = FakeRuntime::new("node-a");
        rt.add_image("img");
        let (tx, mut rx) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let pleg = Pleg::new(rt.clone(), Duration::from_secs(3600), tx);
        let task = tokio::spawn(pleg.run(stop.clone()));
        // Let the first relist run and the event subscription start.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let labels = ContainerLabels {
            pod: pod("1"),
            container: "app".into(),
            restart_count: 0,
            sandbox: false,
            pod_ip: None,
        };
        let spec = ContainerSpec {
            image: "img".into(),
            labels: labels.to_map(),
            ..ContainerSpec::default()
        };
        let id = rt.create("c", spec).await.expect("create");
        rt.start(&id).await.expect("start");
        let bound = Duration::from_secs(10);
        let changed = tokio::time::timeout(bound, rx.recv())
            .await
            .expect("relisted");
        assert_eq!(
            changed,
            Some(PodChanged {
                pod: pod("1"),
                has_containers: true
            })
        );
        rt.remove(&id, true).await.expect("remove");
        let changed = tokio::time::timeout(bound, rx.recv())
            .await
            .expect("relisted");
        assert_eq!(changed.map(|c| c.has_containers), Some(false));
        stop.cancel();
        task.await.expect("join").expect("pleg");
    }

    #[test]
    fn diff_reports_changed_pods() {
        let prev: Snapshot = HashMap::from([
            ("a".into(), (pod("1"), "running".into())),
            ("b".into(), (pod("2"), "running".into())),
            ("c".into(), (pod("3"), "running".into())),
        ]);
        let cur: Snapshot = HashMap::from([
            ("a".into(), (pod("1"), "running".into())),
            ("b".into(), (pod("2"), "exited".into())),
            ("d".into(), (pod("4"), "created".into())),
        ]);
        let mut got: Vec<(String, bool)> = diff(&prev, &cur)
            .into_iter()
            .map(|c| (c.pod.uid, c.has_containers))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [("2".into(), true), ("3".into(), false), ("4".into(), true)]
        );
    }
}
