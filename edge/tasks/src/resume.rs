//! The change a task left pending across edgecore's restart ([`Pending`]), carried on by the
//! edgecore that starts: confirmed once it is connected to cloudhub within the task's
//! timeout, else rolled back (the old configuration restored, or the installed binary run
//! again) and the failure reported by the edgecore that runs after the roll-back.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};
use verge_core::task::{NodeTaskReport, TaskName};
use verge_edgehub::SessionInfo;

use crate::pending::{Change, MAX_BOOTS, Pending, Stage, TaskFiles};
use crate::report::{self, Reporter};
use crate::restart::Restart;
use crate::{Ended, config_update, upgrade};

/// What resuming runs with.
pub(crate) struct Resume<'a> {
    pub files: &'a TaskFiles,
    pub reporter: &'a Reporter,
    pub sessions: watch::Receiver<Option<SessionInfo>>,
    pub restart: &'a Restart,
    /// The binary this edgecore runs from (an upgrade's trial, or the installed one).
    pub running: Option<PathBuf>,
}

/// Confirms or rolls back `pending`: the task's identity once it ended, `None` when
/// edgecore restarts for a roll-back.
pub(crate) async fn resume(mut pending: Pending, r: Resume<'_>) -> Option<Ended> {
    let name = TaskName::parse(&pending.task).ok()?;
    let ended = (
        pending.task.clone(),
        pending.uid.clone(),
        pending.version.clone(),
    );
    if pending.stage == Stage::RolledBack {
        rolled_back(&name, &pending, &r).await;
        return Some(ended);
    }
    if let Change::Upgrade { staged, .. } = &pending.change
        && r.running.as_deref() != Some(staged.as_path())
    {
        // The installed binary runs although a trial was pending: the new one exited before
        // it was connected and the supervisor started the installed one again.
        pending.reason = "the new edgecore exited before it was connected to cloudhub; the \
                          installed one was started again"
            .to_owned();
        warn!(task = %name, reason = %pending.reason, "upgrade rolled back");
        fail_last(&mut pending);
        rolled_back(&name, &pending, &r).await;
        return Some(ended);
    }
    pending.boots += 1;
    let _ = r.files.set_pending(Some(&pending));
    let wait = Duration::from_secs(pending.timeout_seconds.max(1));
    let mut sessions = r.sessions;
    let connected = pending.boots <= MAX_BOOTS
        && tokio::time::timeout(wait, sessions.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
    if connected {
        match confirm(&mut pending) {
            Ok(()) => {
                info!(task = %name, "change confirmed: edgecore is connected");
                let report = NodeTaskReport {
                    phase: "Successful".to_owned(),
                    action_flow: pending.steps.clone(),
                    ..NodeTaskReport::default()
                };
                report_end(&name, &pending, r.reporter, report).await;
                clear(r.files);
                return Some(ended);
            }
            Err(reason) => pending.reason = reason,
        }
    } else {
        pending.reason = if pending.boots > MAX_BOOTS {
            format!("edgecore started {MAX_BOOTS} times with the change without confirming it")
        } else {
            format!(
                "edgecore was not connected to cloudhub within {}s with the change",
                wait.as_secs()
            )
        };
    }
    warn!(task = %name, reason = %pending.reason, "rolling the change back");
    fail_last(&mut pending);
    let program = match &pending.change {
        Change::Config { config, backup } => {
            if let Err(reason) = config_update::restore(config, backup) {
                warn!(task = %name, %reason, "the backup could not be restored");
            }
            None
        }
        Change::Upgrade { installed, .. } => Some(installed.clone()),
    };
    pending.stage = Stage::RolledBack;
    if r.files.set_pending(Some(&pending)).is_ok() {
        match program {
            Some(installed) => r.restart.request_exec(installed),
            None => r.restart.request(),
        }
    }
    None
}

/// Ends a rolled-back change: what is left of it removed, the failure reported with the steps
/// and the roll-back, the pending change forgotten.
async fn rolled_back(name: &TaskName, pending: &Pending, r: &Resume<'_>) {
    undo(&pending.change);
    let reason = format!("rolled back: {}", pending.reason);
    let report = report::failed(reason, rolled(pending));
    report_end(name, pending, r.reporter, report).await;
    clear(r.files);
}

/// Makes the change permanent: the configuration's backup removed, or the trial binary
/// installed (the Upgrade step then says the session's downtime).
fn confirm(pending: &mut Pending) -> Result<(), String> {
    match &pending.change {
        Change::Config { backup, .. } => {
            let _ = std::fs::remove_file(backup);
            Ok(())
        }
        Change::Upgrade {
            installed,
            staged,
            requested_at_ms,
            ..
        } => {
            upgrade::install(installed, staged)?;
            let down = upgrade::now_ms().saturating_sub(*requested_at_ms);
            if let Some(last) = pending.steps.last_mut() {
                last.reason = format!("edge session back {down} ms after the restart began");
            }
            Ok(())
        }
    }
}

/// Undoes what is left of a rolled-back change on disk (the staged binary).
fn undo(change: &Change) {
    if let Change::Upgrade { staged, .. } = change {
        upgrade::discard(staged);
    }
}

/// The steps with the last one failed for `pending.reason`.
fn fail_last(pending: &mut Pending) {
    if let Some(last) = pending.steps.last_mut() {
        last.status = "False".to_owned();
        last.reason.clone_from(&pending.reason);
    }
}

/// The steps and the roll-back.
fn rolled(pending: &Pending) -> Vec<verge_core::task::ActionReport> {
    let mut steps = pending.steps.clone();
    steps.push(report::step("RollBack", None));
    steps
}

/// Sends the final report, with the versions of an upgrade: the new one when it succeeded,
/// the one still running otherwise.
async fn report_end(
    name: &TaskName,
    pending: &Pending,
    reporter: &Reporter,
    mut report: NodeTaskReport,
) {
    if let Change::Upgrade {
        from_version,
        to_version,
        ..
    } = &pending.change
    {
        if report.phase == "Successful" {
            report.current_version.clone_from(to_version);
            report.historic_version.clone_from(from_version);
        } else {
            report.current_version.clone_from(from_version);
        }
    }
    reporter
        .report(name, &pending.uid, &pending.version, report)
        .await;
}

fn clear(files: &TaskFiles) {
    if let Err(reason) = files.set_pending(None) {
        warn!(%reason, "pending change not removed");
    }
}
