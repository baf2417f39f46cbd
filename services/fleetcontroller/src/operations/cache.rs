//! Watch caches of the jobs (the three kinds, typed) and of the edge Nodes, for the
//! downstream task ([`super::downstream`]) and the reports of nodes ([`super::upstream`]).
//! Any change of a job re-evaluates every connected node: jobs are few and each names many
//! nodes.

use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher as watch;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verge_controller::reflect;
use verge_core::EDGE_NODE_LABEL;

use super::Job;
use crate::api::operations::{ConfigUpdateJob, ImagePrePullJob, NodeUpgradeJob};

/// A change seen by a cache, after its store was updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// A job was added, changed or deleted, or its registry credentials were read.
    Job,
    /// An edge Node was added, changed or deleted.
    Node,
    /// A cache finished a (re)list.
    Relisted,
}

/// Read handles of the caches; cheap to clone.
#[derive(Clone)]
pub struct JobCaches {
    /// NodeUpgradeJobs.
    pub upgrades: Store<NodeUpgradeJob>,
    /// ImagePrePullJobs.
    pub prepulls: Store<ImagePrePullJob>,
    /// ConfigUpdateJobs.
    pub configs: Store<ConfigUpdateJob>,
    /// Nodes labelled [`EDGE_NODE_LABEL`].
    pub nodes: Store<Node>,
}

/// The cache of job kind `J`, its watch task started on `tracker`.
fn job_cache<J: Job>(
    client: &kube::Client,
    events: &mpsc::Sender<JobEvent>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Store<J> {
    let (store, task) = reflect::cache(
        Api::<J>::all(client.clone()),
        (),
        watch::Config::default(),
        events,
        &[],
        JobEvent::Relisted,
        |_| Some(JobEvent::Job),
    );
    reflect::spawn(tracker, shutdown, J::KIND.as_str(), task);
    store
}

impl JobCaches {
    /// Starts the four watch tasks on `tracker`; they report to `events` and end at
    /// `shutdown`. Needs list/watch on the three job kinds and on nodes.
    pub fn start(
        client: &kube::Client,
        events: &mpsc::Sender<JobEvent>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Self {
        let upgrades = job_cache::<NodeUpgradeJob>(client, events, tracker, shutdown);
        let prepulls = job_cache::<ImagePrePullJob>(client, events, tracker, shutdown);
        let configs = job_cache::<ConfigUpdateJob>(client, events, tracker, shutdown);
        let (nodes, task) = reflect::cache(
            Api::<Node>::all(client.clone()),
            (),
            watch::Config::default().labels(EDGE_NODE_LABEL),
            events,
            &[],
            JobEvent::Relisted,
            |_| Some(JobEvent::Node),
        );
        reflect::spawn(tracker, shutdown, "node", task);
        Self {
            upgrades,
            prepulls,
            configs,
            nodes,
        }
    }

    /// Waits until every cache has listed once. Several tasks wait at once (the job
    /// controllers and the downstream task), and a kube-runtime `Store` wakes only the
    /// waiter that polled it last: each wait is polled again every 200 ms, so that none is
    /// left asleep.
    ///
    /// # Errors
    /// A cache's writer was dropped (shutdown).
    pub async fn wait_ready(&self) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        let poll = std::time::Duration::from_millis(200);
        for ready in [
            self.upgrades.wait_until_ready().boxed(),
            self.prepulls.wait_until_ready().boxed(),
            self.configs.wait_until_ready().boxed(),
            self.nodes.wait_until_ready().boxed(),
        ] {
            let mut ready = ready;
            loop {
                match tokio::time::timeout(poll, &mut ready).await {
                    Ok(result) => {
                        result?;
                        break;
                    }
                    Err(_) => continue,
                }
            }
        }
        Ok(())
    }

    /// Whether `node` is a known edge node.
    pub fn is_edge_node(&self, node: &str) -> bool {
        self.nodes
            .get(&kube::runtime::reflector::ObjectRef::new(node))
            .is_some()
    }
}
