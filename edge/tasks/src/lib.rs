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
//! - [`config_update`]: ConfigUpdateJob: fields of edgecore's configuration changed, checked
//!   first, applied by a [`restart`] of edgecore, rolled back when it is not connected again in
//!   time ([`pending`] carries it across the restart, `resume` finishes it).
//! - [`upgrade`]: NodeUpgradeJob: edgecore's binary replaced by the one in the job's image,
//!   verified by digest, run on trial and installed once connected, else rolled back.
//! - [`checks`]: the `cpu`, `mem` and `disk` checks before a task.
//! - [`report`]: the report messages.
//!
//! What ran to its end is remembered across restarts (`<dataDir>/tasks/done.json`).
//! Nothing here runs a shell or builds a command line.

pub mod checks;
pub mod config_update;
pub mod pending;
pub mod prepull;
pub mod report;
pub mod restart;
mod resume;
mod steps;
pub mod upgrade;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use verge_container_runtime::ContainerRuntime;
use verge_core::task::{ActionReport, NodeTask, NodeTaskReport, TaskAction, TaskName};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;
use verge_edgehub::{EdgeHubHandle, SessionInfo};
use verge_metamanager::{Applied, StoreEvent};

use config_update::ConfigFile;
use pending::{Done, TaskFiles};
use report::Reporter;
use restart::Restart;

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

/// What tasks run with besides the store and the container runtime.
#[derive(Debug, Clone)]
pub struct TaskEnv {
    /// edgecore's data directory: the `disk` check measures its filesystem, and
    /// `<dataDir>/tasks/` holds what taskmanager keeps ([`pending`]).
    pub data_dir: PathBuf,
    /// edgecore's configuration file, for ConfigUpdateJobs (`None`: edgecore runs without one,
    /// and such a task fails).
    pub config: Option<ConfigFile>,
    /// How to restart edgecore.
    pub restart: Restart,
    /// The binary edgecore runs from (`/proc/self/exe` at its start), which an upgrade
    /// replaces (`None`: unknown, and upgrades fail).
    pub binary: Option<PathBuf>,
}

/// The task runner. `R` is the container runtime pulls go through.
pub struct TaskManager<R> {
    store: MetaStore,
    reporter: Reporter,
    sessions: watch::Receiver<Option<SessionInfo>>,
    events: broadcast::Receiver<StoreEvent>,
    runtime: R,
    env: TaskEnv,
    files: TaskFiles,
}

/// A task being run: its version and how to stop it.
struct Running {
    uid: String,
    version: String,
    stop: CancellationToken,
}

/// What a task that ended leaves: its name, uid and version.
type Ended = (String, String, String);

impl<R: ContainerRuntime> TaskManager<R> {
    /// A runner over `store` (tasks), reporting through `hub`, told of changes by `events`
    /// (metamanager's), pulling through `runtime`, with `env`.
    pub fn new(
        store: MetaStore,
        hub: EdgeHubHandle,
        events: broadcast::Receiver<StoreEvent>,
        runtime: R,
        env: TaskEnv,
    ) -> Self {
        Self {
            store,
            sessions: hub.sessions(),
            reporter: Reporter::new(hub),
            events,
            runtime,
            files: TaskFiles::new(&env.data_dir),
            env,
        }
    }

    /// Runs until `shutdown`: every stored task, then each one stored or deleted.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let tracker = TaskTracker::new();
        let mut running: HashMap<String, Running> = HashMap::new();
        // What ran to its end, by name: (uid, version). Not run again.
        let mut done: Done = self.files.done();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        self.resume(&mut done, &tracker, &done_tx);
        self.relist(&mut running, &done, &tracker, &done_tx, &shutdown)?;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some((name, uid, version)) = done_rx.recv() => {
                    if running.get(&name).is_some_and(|r: &Running| r.uid == uid && r.version == version) {
                        running.remove(&name);
                    }
                    done.insert(name, (uid, version));
                    self.save(&done);
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
                            if done.remove(&event.key.name).is_some() {
                                self.save(&done);
                            }
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
        done: &Done,
        tracker: &TaskTracker,
        done_tx: &mpsc::UnboundedSender<Ended>,
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
        done: &Done,
        tracker: &TaskTracker,
        done_tx: &mpsc::UnboundedSender<Ended>,
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
        let context = Context {
            reporter: self.reporter.clone(),
            runtime: self.runtime.clone(),
            env: self.env.clone(),
            files: self.files.clone(),
        };
        let done_tx = done_tx.clone();
        tracker.spawn(async move {
            if execute(&task, &context, &stop).await == Outcome::Ended {
                let _ = done_tx.send((name, task.uid, task.version));
            }
        });
    }

    /// Writes what ran to its end (a failure is logged: the tasks may run again after a
    /// restart, which they bear).
    fn save(&self, done: &Done) {
        if let Err(reason) = self.files.set_done(done) {
            warn!(%reason, "tasks done not saved");
        }
    }

    /// Carries on with a change from before the restart (configuration, binary): its task is
    /// not run again; it is confirmed once edgecore is connected, or rolled back.
    fn resume(
        &self,
        done: &mut Done,
        tracker: &TaskTracker,
        done_tx: &mpsc::UnboundedSender<Ended>,
    ) {
        let pending = match self.files.pending() {
            Ok(Some(pending)) => pending,
            Ok(None) => return,
            Err(reason) => {
                warn!(%reason, "pending change unreadable: left as it is");
                return;
            }
        };
        done.insert(
            pending.task.clone(),
            (pending.uid.clone(), pending.version.clone()),
        );
        let (files, reporter, sessions, restart, done_tx) = (
            self.files.clone(),
            self.reporter.clone(),
            self.sessions.clone(),
            self.env.restart.clone(),
            done_tx.clone(),
        );
        let running = self.env.binary.clone();
        tracker.spawn(async move {
            let r = resume::Resume {
                files: &files,
                reporter: &reporter,
                sessions,
                restart: &restart,
                running,
            };
            if let Some(ended) = resume::resume(pending, r).await {
                let _ = done_tx.send(ended);
            }
        });
    }
}

/// What a task runs with.
struct Context<R> {
    reporter: Reporter,
    runtime: R,
    env: TaskEnv,
    files: TaskFiles,
}

/// How a task's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// It reported its end.
    Ended,
    /// It was stopped (deleted, a newer version, shutdown): nothing more reported.
    Stopped,
    /// It restarts edgecore; the restarted edgecore finishes it.
    Restarting,
}

/// Runs `task` and reports on it.
async fn execute<R: ContainerRuntime>(
    task: &StoredTask,
    context: &Context<R>,
    stop: &CancellationToken,
) -> Outcome {
    let reporter = &context.reporter;
    let send =
        |report: NodeTaskReport| reporter.report(&task.name, &task.uid, &task.version, report);
    let spec = match &task.task {
        Ok(spec) => spec,
        Err(reason) => {
            send(report::failed(reason.clone(), Vec::new())).await;
            return Outcome::Ended;
        }
    };
    info!(task = %task.name, "task started");
    send(report::in_progress()).await;
    let timeout = Duration::from_secs(spec.timeout_seconds.max(1));
    if let TaskAction::Upgrade(up) = &spec.action
        && up.require_confirmation
        && !up.confirmed
    {
        return wait_for_confirmation(task, spec, context, stop).await;
    }
    let work = async {
        let check = match check(spec, context).await {
            Ok(check) => check,
            Err(failed) => return Some(failed),
        };
        match &spec.action {
            TaskAction::PrePull(pull) => Some(prepull::run(&context.runtime, pull, check).await),
            TaskAction::ConfigUpdate(update) => {
                steps::configure(task, spec, update, check, context).await
            }
            TaskAction::Upgrade(up) => {
                let mut flow = vec![check];
                if up.require_confirmation {
                    flow.push(report::step("WaitingConfirmation", None));
                }
                steps::upgrade(task, spec, up, flow, context).await
            }
        }
    };
    let outcome = tokio::select! {
        () = stop.cancelled() => {
            debug!(task = %task.name, "task stopped");
            return Outcome::Stopped;
        }
        outcome = tokio::time::timeout(timeout, work) => outcome,
    };
    let report = match outcome {
        Ok(Some(report)) => report,
        Ok(None) => return Outcome::Restarting,
        Err(_) => report::failed(
            format!("timed out after {}s", timeout.as_secs()),
            Vec::new(),
        ),
    };
    info!(task = %task.name, phase = %report.phase, reason = %report.reason, "task ended");
    send(report).await;
    Outcome::Ended
}

/// The `Check` step: its report when the checks passed, else the task's failure.
async fn check<R>(spec: &NodeTask, context: &Context<R>) -> Result<ActionReport, NodeTaskReport> {
    let check = checks::run(&spec.checks, &context.env.data_dir).await;
    if check.status == "True" {
        return Ok(check);
    }
    let reason = format!("check failed: {}", check.reason);
    Err(report::failed(reason, vec![check]))
}

/// An upgrade that waits for its administrator's confirmation: the checks run, then the
/// node reports `WaitingConfirmation` and waits, without a timeout, until the task is stopped
/// (the confirmed version replaces it, or the job is deleted).
async fn wait_for_confirmation<R: ContainerRuntime>(
    task: &StoredTask,
    spec: &NodeTask,
    context: &Context<R>,
    stop: &CancellationToken,
) -> Outcome {
    let send = |report| {
        context
            .reporter
            .report(&task.name, &task.uid, &task.version, report)
    };
    let check = match check(spec, context).await {
        Ok(check) => check,
        Err(failed) => {
            send(failed).await;
            return Outcome::Ended;
        }
    };
    let mut waiting = report::step("WaitingConfirmation", None);
    waiting.status = "Unknown".to_owned();
    waiting.reason = format!(
        "waiting for the node's administrator: annotate the job with {}",
        verge_core::task::CONFIRM_ANNOTATION
    );
    let report = NodeTaskReport {
        phase: "InProgress".to_owned(),
        action_flow: vec![check, waiting],
        ..NodeTaskReport::default()
    };
    info!(task = %task.name, "upgrade waits for confirmation");
    send(report).await;
    stop.cancelled().await;
    Outcome::Stopped
}

#[cfg(test)]
mod tests;
