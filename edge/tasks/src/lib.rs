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
//!   time ([`pending`] carries it across the restart).
//! - [`checks`]: the `cpu`, `mem` and `disk` checks before a task.
//! - [`report`]: the report messages.
//!
//! What ran to its end is remembered across restarts (`<dataDir>/tasks/done.json`).
//! NodeUpgradeJob tasks are not run yet: they are reported as failed with that reason.
//! Nothing here runs a shell or builds a command line.

pub mod checks;
pub mod config_update;
pub mod pending;
pub mod prepull;
pub mod report;
pub mod restart;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use verge_container_runtime::ContainerRuntime;
use verge_core::task::{NodeTask, NodeTaskReport, TaskAction, TaskName};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;
use verge_edgehub::{EdgeHubHandle, SessionInfo};
use verge_metamanager::{Applied, StoreEvent};

use config_update::ConfigFile;
use pending::{Done, MAX_BOOTS, Pending, Stage, TaskFiles};
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

    /// Carries on with a configuration change from before the restart: its task is not run
    /// again; it is confirmed once edgecore is connected, or rolled back.
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
                warn!(%reason, "pending configuration change unreadable: left as it is");
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
        tracker.spawn(async move {
            if let Some(ended) = resume(pending, &files, &reporter, sessions, &restart).await {
                let _ = done_tx.send(ended);
            }
        });
    }
}

/// Confirms or rolls back `pending` (see [`config_update`]); the task's identity once it
/// ended, `None` when edgecore restarts for a roll-back.
async fn resume(
    mut pending: Pending,
    files: &TaskFiles,
    reporter: &Reporter,
    mut sessions: watch::Receiver<Option<SessionInfo>>,
    restart: &Restart,
) -> Option<Ended> {
    let name = TaskName::parse(&pending.task).ok()?;
    let ended = (
        pending.task.clone(),
        pending.uid.clone(),
        pending.version.clone(),
    );
    if pending.stage == Stage::RolledBack {
        let mut steps = pending.steps.clone();
        steps.push(report::step("RollBack", None));
        let reason = format!("rolled back: {}", pending.reason);
        reporter
            .report(
                &name,
                &pending.uid,
                &pending.version,
                report::failed(reason, steps),
            )
            .await;
        clear(files);
        return Some(ended);
    }
    pending.boots += 1;
    let _ = files.set_pending(Some(&pending));
    let wait = Duration::from_secs(pending.timeout_seconds.max(1));
    let connected = pending.boots <= MAX_BOOTS
        && tokio::time::timeout(wait, sessions.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
    if connected {
        info!(task = %name, "configuration change confirmed: edgecore is connected");
        let _ = std::fs::remove_file(&pending.backup);
        let report = verge_core::task::NodeTaskReport {
            phase: "Successful".to_owned(),
            action_flow: pending.steps.clone(),
            ..verge_core::task::NodeTaskReport::default()
        };
        reporter
            .report(&name, &pending.uid, &pending.version, report)
            .await;
        clear(files);
        return Some(ended);
    }
    pending.reason = if pending.boots > MAX_BOOTS {
        format!(
            "edgecore started {MAX_BOOTS} times with the new configuration without confirming it"
        )
    } else {
        format!(
            "edgecore was not connected to cloudhub within {}s with the new configuration",
            wait.as_secs()
        )
    };
    warn!(task = %name, reason = %pending.reason, "rolling the configuration back");
    if let Some(last) = pending.steps.last_mut() {
        last.status = "False".to_owned();
        last.reason.clone_from(&pending.reason);
    }
    if let Err(reason) = config_update::restore(&pending.config, &pending.backup) {
        warn!(task = %name, %reason, "the backup could not be restored");
    }
    pending.stage = Stage::RolledBack;
    if files.set_pending(Some(&pending)).is_ok() {
        restart.request();
    }
    None
}

fn clear(files: &TaskFiles) {
    if let Err(reason) = files.set_pending(None) {
        warn!(%reason, "pending configuration change not removed");
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
    let work = async {
        let check = checks::run(&spec.checks, &context.env.data_dir).await;
        if check.status != "True" {
            let reason = format!("check failed: {}", check.reason);
            return Some(report::failed(reason, vec![check]));
        }
        match &spec.action {
            TaskAction::PrePull(pull) => Some(prepull::run(&context.runtime, pull, check).await),
            TaskAction::ConfigUpdate(update) => configure(task, spec, update, check, context).await,
            TaskAction::Upgrade(_) => Some(report::failed(
                "this edgecore does not run this kind of task yet".to_owned(),
                vec![check],
            )),
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

/// A ConfigUpdateJob's steps up to the restart (see [`config_update`]): the report when it
/// ended before (refused, or a step failed), `None` once edgecore restarts with the new file.
async fn configure<R: ContainerRuntime>(
    task: &StoredTask,
    spec: &NodeTask,
    update: &verge_core::task::ConfigUpdate,
    check: verge_core::task::ActionReport,
    context: &Context<R>,
) -> Option<NodeTaskReport> {
    let Some(file) = &context.env.config else {
        let reason = "edgecore runs without a configuration file (--config)".to_owned();
        return Some(report::failed(reason, vec![check]));
    };
    let (file, fields) = (file.clone(), update.fields.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        let text = config_update::prepare(&file, &fields)?;
        config_update::back_up(&file)?;
        Ok::<_, String>((file, text))
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let (file, text) = match prepared {
        Ok(prepared) => prepared,
        Err(reason) => {
            let steps = vec![report::step("Check", Some(reason.clone()))];
            return Some(report::failed(reason, steps));
        }
    };
    let mut steps = vec![check, report::step("BackUp", None)];
    steps.push(report::step("Update", None));
    let pending = Pending {
        task: task.name.to_string(),
        uid: task.uid.clone(),
        version: task.version.clone(),
        stage: Stage::Applied,
        config: file.path.clone(),
        backup: file.backup(),
        timeout_seconds: spec.timeout_seconds,
        boots: 0,
        steps: steps.clone(),
        reason: String::new(),
    };
    if let Err(reason) = context.files.set_pending(Some(&pending)) {
        return Some(report::failed(reason, steps));
    }
    if let Err(reason) = config_update::write(&file, &text) {
        let _ = context.files.set_pending(None);
        return Some(report::failed(reason, steps));
    }
    info!(task = %task.name, "configuration written; edgecore restarts with it");
    let progress = NodeTaskReport {
        phase: "InProgress".to_owned(),
        action_flow: steps,
        ..NodeTaskReport::default()
    };
    context
        .reporter
        .report(&task.name, &task.uid, &task.version, progress)
        .await;
    context.env.restart.request();
    None
}

#[cfg(test)]
mod tests;
