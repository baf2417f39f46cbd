//! taskmanager's reports: `update _/nodetaskstatus/<kind>.<job>` (group `fleet`) with a
//! [`NodeTaskReport`], header uid = the job's uid and resourceVersion = the task's version,
//! put into edgehub's outbox (the newest report of a task replaces an older one not yet
//! acknowledged).

use tracing::warn;
use verge_core::task::{ActionReport, NodeTaskReport, TaskName};
use verge_core::{Envelope, Group, Kind, Module, ObjectVersion, ResourceKey, ResourceType, Write};
use verge_edgehub::EdgeHubHandle;

/// Sends reports through edgehub's outbox; cheap to clone.
#[derive(Clone)]
pub struct Reporter {
    hub: EdgeHubHandle,
}

impl Reporter {
    /// A reporter through `hub`.
    pub fn new(hub: EdgeHubHandle) -> Self {
        Self { hub }
    }

    /// Puts `report` on task `name` (job `uid`, task `version`) into the outbox; a refusal
    /// (the outbox is full) is logged: the task's next report or the cloud's resync follows.
    pub async fn report(&self, name: &TaskName, uid: &str, version: &str, report: NodeTaskReport) {
        let message = message(name, uid, version, &report);
        if let Err(error) = self.hub.report(message).await {
            warn!(task = %name, %error, "task report not queued");
        }
    }
}

/// The report message.
pub fn message(name: &TaskName, uid: &str, version: &str, report: &NodeTaskReport) -> Envelope {
    let kind = Kind::Upsert {
        write: Write::Update,
        key: ResourceKey::cluster(ResourceType::NodeTaskStatus, name.to_string()),
        version: ObjectVersion::new(uid, version),
    };
    // A report (strings only) always serializes.
    let body = serde_json::to_vec(report).unwrap_or_default();
    Envelope::new(Module::TaskManager, Group::Fleet, kind, body)
}

/// Now, RFC 3339 in UTC with seconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A step that ended now: `True` without a reason, `False` with one.
pub fn step(action: &str, failure: Option<String>) -> ActionReport {
    ActionReport {
        action: action.to_owned(),
        status: if failure.is_some() { "False" } else { "True" }.to_owned(),
        reason: failure.unwrap_or_default(),
        time: now(),
    }
}

/// The report of a task that started.
pub fn in_progress() -> NodeTaskReport {
    NodeTaskReport {
        phase: "InProgress".to_owned(),
        ..NodeTaskReport::default()
    }
}

/// The report of a task that failed for `reason` after `steps`.
pub fn failed(reason: String, steps: Vec<ActionReport>) -> NodeTaskReport {
    NodeTaskReport {
        phase: "Failure".to_owned(),
        reason,
        action_flow: steps,
        ..NodeTaskReport::default()
    }
}
