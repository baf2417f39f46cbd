//! taskmanager: the edge's runner of fleet tasks (KubeEdge's task manager on the node). A task
//! is one node's share of an `operations.kubeedge.io` job, sent by fleetcontroller as
//! `update _/nodetask/<kind>.<job>` (group `fleet`) and stored by metamanager like any
//! object, so it is in the node's inventory and a node offline when its task started gets it
//! when it connects. taskmanager runs each stored task once per version (the job's uid and
//! generation), within its timeout, and reports its progress through edgehub's outbox
//! (`update _/nodetaskstatus/<name>`, durable: the newest report of a task survives an outage
//! and a restart). A task deleted by the cloud is stopped.
//!
//! - [`prepull`]: ImagePrePullJob: the images pulled through the container runtime, with the
//!   job's registry logins and retries.
//! - [`checks`]: the `cpu`, `mem` and `disk` checks before a task.
//! - [`report`]: the report messages.
//!
//! NodeUpgradeJob and ConfigUpdateJob tasks are not run yet: they are reported as failed
//! with that reason. Nothing here runs a shell or builds a command line.

pub mod checks;
pub mod prepull;
pub mod report;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use verge_container_runtime::ContainerRuntime;
use verge_core::task::{NodeTask, NodeTaskReport, TaskAction, TaskName};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::{Applied, StoreEvent};

use report::Reporter;

/// Why taskmanager stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be read.
    #[error("store: {0}")]
    Store(#[from] verge_edge_store::Error),
}

/// One task as stored: its name, version and content.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// `<kind>.<job>`.
    pub name: TaskName,
    /// The job's uid.
    pub uid: String,
    /// The job's generation (the stored resourceVersion).
    pub version: String,
    /// What to do; `Err` with the reason when the content is no task.
    pub task: Result<NodeTask, String>,
}

/// Reads the stored task at `key`.
fn read(store: &MetaStore, key: &ResourceKey) -> Result<Option<StoredTask>, Error> {
    let Some(object) = store.get(key)? else {
        return Ok(None);
    };
    let Ok(name) = TaskName::parse(&key.name) else {
        return Ok(None);
    };
    let task = serde_json::from_slice::<NodeTask>(&object.content)
        .map_err(|e| format!("the task cannot be read: {e}"));
    Ok(Some(StoredTask {
        name,
        uid: object.uid,
        version: object.resource_version,
        task,
    }))
}

/// The task runner. `R` is the container runtime pulls go through.
pub struct TaskManager<R> {
    store: MetaStore,
    reporter: Reporter,
    events: broadcast::Receiver<StoreEvent>,
    runtime: R,
    data_dir: PathBuf,
}

/// A task being run: its version and how to stop it.
struct Running {
    uid: String,
    version: String,
    stop: CancellationToken,
}

impl<R: ContainerRuntime> TaskManager<R> {
    /// A runner over `store` (tasks), reporting through `hub`, told of changes by `events`
    /// (metamanager's), pulling through `runtime`; `data_dir` is the filesystem the `disk`
    /// check measures.
    pub fn new(
        store: MetaStore,
        hub: EdgeHubHandle,
        events: broadcast::Receiver<StoreEvent>,
        runtime: R,
        data_dir: PathBuf,
    ) -> Self {
        Self {
            store,
            reporter: Reporter::new(hub),
            events,
            runtime,
            data_dir,
        }
    }

    /// Runs until `shutdown`: every stored task, then each one stored or deleted.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let tracker = TaskTracker::new();
        let mut running: HashMap<String, Running> = HashMap::new();
        // What ran to its end, by name: (uid, version). Not run again in this process.
        let mut done: HashMap<String, (String, String)> = HashMap::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        self.relist(&mut running, &done, &tracker, &done_tx, &shutdown)?;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some((name, uid, version)) = done_rx.recv() => {
                    if running.get(&name).is_some_and(|r: &Running| r.uid == uid && r.version == version) {
                        running.remove(&name);
                    }
                    done.insert(name, (uid, version));
                }
                event = self.events.recv() => match event {
                    Ok(event) if event.key.kind == ResourceType::NodeTask => match event.applied {
                        Applied::Stored => {
                            if let Some(task) = read(&self.store, &event.key)? {
                                self.start(task, &mut running, &done, &tracker, &done_tx, &shutdown);
                            }
                        }
                        Applied::Deleted => {
                            if let Some(r) = running.remove(&event.key.name) {
                                info!(task = %event.key.name, "task deleted by the cloud: stopped");
                                r.stop.cancel();
                            }
                            done.remove(&event.key.name);
                        }
                        Applied::Stale | Applied::Absent => {}
                    },
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        warn!(missed = n, "store events lagged; relisting tasks");
                        self.relist(&mut running, &done, &tracker, &done_tx, &shutdown)?;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        tracker.close();
        tracker.wait().await;
        Ok(())
    }

    fn relist(
        &self,
        running: &mut HashMap<String, Running>,
        done: &HashMap<String, (String, String)>,
        tracker: &TaskTracker,
        done_tx: &tokio::sync::mpsc::UnboundedSender<(String, String, String)>,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        for (key, _) in self.store.list(ResourceType::NodeTask)? {
            if let Some(task) = read(&self.store, &key)? {
                self.start(task, running, done, tracker, done_tx, shutdown);
            }
        }
        Ok(())
    }

    /// Starts `task` unless this version runs or ran; a newer version stops the older.
    fn start(
        &self,
        task: StoredTask,
        running: &mut HashMap<String, Running>,
        done: &HashMap<String, (String, String)>,
        tracker: &TaskTracker,
        done_tx: &tokio::sync::mpsc::UnboundedSender<(String, String, String)>,
        shutdown: &CancellationToken,
    ) {
        let name = task.name.to_string();
        let version = (task.uid.clone(), task.version.clone());
        if done.get(&name) == Some(&version) {
            return;
        }
        if let Some(r) = running.get(&name) {
            if (r.uid.clone(), r.version.clone()) == version {
                return;
            }
            r.stop.cancel();
        }
        let stop = shutdown.child_token();
        running.insert(
            name.clone(),
            Running {
                uid: task.uid.clone(),
                version: task.version.clone(),
                stop: stop.clone(),
            },
        );
        let (reporter, runtime, data_dir, done_tx) = (
            self.reporter.clone(),
            self.runtime.clone(),
            self.data_dir.clone(),
            done_tx.clone(),
        );
        tracker.spawn(async move {
            let ended = execute(&task, &reporter, &runtime, &data_dir, &stop).await;
            if ended {
                let _ = done_tx.send((name, task.uid, task.version));
            }
        });
    }
}

/// Runs `task` and reports on it; `false` when it was stopped before its end (nothing more
/// is reported then).
async fn execute<R: ContainerRuntime>(
    task: &StoredTask,
    reporter: &Reporter,
    runtime: &R,
    data_dir: &std::path::Path,
    stop: &CancellationToken,
) -> bool {
    let send =
        |report: NodeTaskReport| reporter.report(&task.name, &task.uid, &task.version, report);
    let spec = match &task.task {
        Ok(spec) => spec,
        Err(reason) => {
            send(report::failed(reason.clone(), Vec::new())).await;
            return true;
        }
    };
    info!(task = %task.name, "task started");
    send(report::in_progress()).await;
    let timeout = Duration::from_secs(spec.timeout_seconds.max(1));
    let work = async {
        let check = checks::run(&spec.checks, data_dir).await;
        if check.status != "True" {
            let reason = format!("check failed: {}", check.reason);
            return report::failed(reason, vec![check]);
        }
        match &spec.action {
            TaskAction::PrePull(pull) => prepull::run(runtime, pull, check).await,
            TaskAction::Upgrade(_) | TaskAction::ConfigUpdate(_) => report::failed(
                "this edgecore does not run this kind of task yet".to_owned(),
                vec![check],
            ),
        }
    };
    let outcome = tokio::select! {
        () = stop.cancelled() => {
            debug!(task = %task.name, "task stopped");
            return false;
        }
        outcome = tokio::time::timeout(timeout, work) => outcome,
    };
    let report = outcome.unwrap_or_else(|_| {
        report::failed(
            format!("timed out after {}s", timeout.as_secs()),
            Vec::new(),
        )
    });
    info!(task = %task.name, phase = %report.phase, reason = %report.reason, "task ended");
    send(report).await;
    true
}

#[cfg(test)]
mod tests;
