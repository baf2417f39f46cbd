//! Upstream: nodes' reports on their tasks, written into the jobs' status.
//!
//! Served: `update _/nodetaskstatus/<kind>.<job>` (group `fleet`) with a
//! [`NodeTaskReport`] body and header uid = the job's uid. A node may report only on a job
//! that lists it; a report for a job that is gone or was re-created (another uid) is acked
//! and dropped. The entry is written with the job's resourceVersion as precondition (read,
//! changed, merge-patched; tried again on a conflict), then the job moves on
//! ([`super::progress::advance`]: the next nodes start). The answer is `ack` once written,
//! `error` with the reason otherwise (the edge's outbox tries again).

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::{debug, warn};
use verge_core::task::{JobKind, NodeTaskReport, TaskName};
use verge_core::{Envelope, Group, Kind, Operation, Outcome, ResourceType};

use super::progress::{self, ReportError};
use super::validate;
use crate::api::operations::{ConfigUpdateJobSpec, ImagePrePullJobSpec, NodeUpgradeJobSpec};

/// How often a report is written again after a conflicting write of the job's status.
const CONFLICT_RETRIES: usize = 5;

/// What upstream handling needs: the API client.
#[derive(Clone)]
pub struct Context {
    /// The Kubernetes client (fleetcontroller's service account).
    pub client: Client,
}

impl verge_controller::dispatch::Handler for Context {
    fn handle(
        &self,
        node: &str,
        message: &Envelope,
    ) -> impl std::future::Future<Output = Option<Envelope>> + Send {
        handle(self.client.clone(), node.to_owned(), message.clone())
    }
}

/// A node's report, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The task (job kind and name).
    pub task: TaskName,
    /// The job's uid the report was made for.
    pub uid: String,
    /// The progress.
    pub report: NodeTaskReport,
}

/// Classifies `message` from the session of `node`; `Ok(None)` for the edge's answers to
/// downstream messages (never answered).
///
/// # Errors
/// A reason for people: another group, operation or type, a path of another node, no uid,
/// a name that is no task, a body that is no report.
pub fn parse(node: &str, message: &Envelope) -> Result<Option<Report>, String> {
    if let Kind::Answer { .. } = message.kind {
        return Ok(None);
    }
    let path = message.path();
    if message.group != Group::Fleet || message.operation() != Operation::Update {
        return Err(format!("{} {path} is not served", message.operation()));
    }
    let resource = message
        .node_resource()
        .ok_or_else(|| format!("{path} is not node/<node>/_/nodetaskstatus/<task>"))?;
    if resource.node != node {
        return Err(format!(
            "forbidden: node {node} reports for {}",
            resource.node
        ));
    }
    if resource.key.kind != ResourceType::NodeTaskStatus {
        return Err(format!("{path} is not served"));
    }
    let task = TaskName::parse(&resource.key.name).map_err(|e| e.to_string())?;
    let uid = message
        .kind
        .version()
        .map(|v| v.uid.clone())
        .unwrap_or_default();
    if uid.is_empty() {
        return Err(format!("{path}: no job uid"));
    }
    let report = serde_json::from_slice(&message.body)
        .map_err(|e| format!("{path}: not a task report: {e}"))?;
    Ok(Some(Report { task, uid, report }))
}

/// The API resource of a job kind (v1alpha2).
pub fn job_resource(kind: JobKind) -> ApiResource {
    let (kind_name, plural) = match kind {
        JobKind::NodeUpgradeJob => ("NodeUpgradeJob", "nodeupgradejobs"),
        JobKind::ImagePrePullJob => ("ImagePrePullJob", "imageprepulljobs"),
        JobKind::ConfigUpdateJob => ("ConfigUpdateJob", "configupdatejobs"),
    };
    ApiResource {
        group: "operations.kubeedge.io".to_owned(),
        version: "v1alpha2".to_owned(),
        api_version: "operations.kubeedge.io/v1alpha2".to_owned(),
        kind: kind_name.to_owned(),
        plural: plural.to_owned(),
    }
}

/// The job's `concurrency` and `failureTolerate`, from its spec (defaults for one that does
/// not parse: it is failed already).
fn knobs(kind: JobKind, spec: &serde_json::Value) -> (u32, f64) {
    let targets = match kind {
        JobKind::NodeUpgradeJob => serde_json::from_value::<NodeUpgradeJobSpec>(spec.clone())
            .ok()
            .and_then(|s| validate::upgrade(&s).ok().map(|u| u.targets)),
        JobKind::ImagePrePullJob => serde_json::from_value::<ImagePrePullJobSpec>(spec.clone())
            .ok()
            .and_then(|s| validate::prepull(&s).ok().map(|p| p.targets)),
        JobKind::ConfigUpdateJob => serde_json::from_value::<ConfigUpdateJobSpec>(spec.clone())
            .ok()
            .and_then(|s| validate::config_update(&s).ok().map(|c| c.targets)),
    };
    targets.map_or((1, validate::DEFAULT_FAILURE_TOLERATE), |t| {
        (t.concurrency, t.failure_tolerate)
    })
}

/// Writes `report` of `node` into its job.
///
/// # Errors
/// A reason for people (the edge tries again): the API server refused or kept conflicting.
pub async fn write(client: &Client, node: &str, report: &Report) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &job_resource(report.task.kind));
    for _ in 0..CONFLICT_RETRIES {
        let Some(job) = api
            .get_opt(&report.task.job)
            .await
            .map_err(|e| format!("reading job {}: {}", report.task, api_reason(&e)))?
        else {
            debug!(task = %report.task, "report for a job that is gone: dropped");
            return Ok(());
        };
        if job.metadata.uid.as_deref() != Some(report.uid.as_str()) {
            debug!(task = %report.task, "report for an earlier job of this name: dropped");
            return Ok(());
        }
        let mut status = job.data["status"].clone();
        match progress::apply_report(&mut status, report.task.kind, node, &report.report) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e @ ReportError::NotSelected(_)) => return Err(format!("forbidden: {e}")),
            Err(e) => return Err(e.to_string()),
        }
        let (concurrency, tolerate) = knobs(report.task.kind, &job.data["spec"]);
        progress::advance(&mut status, concurrency, tolerate);
        let patch = json!({
            "metadata": {"resourceVersion": job.metadata.resource_version},
            "status": {"phase": status["phase"], "reason": status["reason"],
                       "nodeStatus": status["nodeStatus"]},
        });
        match api
            .patch_status(
                &report.task.job,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => {
                return Err(format!(
                    "writing job {} status: {}",
                    report.task,
                    api_reason(&e)
                ));
            }
        }
    }
    Err(format!(
        "job {} status kept changing; try again",
        report.task
    ))
}

/// The API server's message for a refused call, else the error.
fn api_reason(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

async fn handle(client: Client, node: String, message: Envelope) -> Option<Envelope> {
    let result = match parse(&node, &message) {
        Ok(None) => return None,
        Ok(Some(report)) => write(&client, &node, &report).await,
        Err(reason) => Err(reason),
    };
    let outcome = match result {
        Ok(()) => Outcome::Ack,
        Err(reason) => {
            warn!(%node, resource = %message.path(), %reason, "task report refused");
            Outcome::Error(reason)
        }
    };
    Some(crate::IDENTITY.answer(&message, outcome, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use verge_core::{Module, ObjectVersion, ResourceKey};

    fn report(path_node: &str, name: &str, uid: &str, body: &str) -> Envelope {
        let key = ResourceKey::cluster(ResourceType::NodeTaskStatus, name);
        let kind = Kind::Upsert {
            write: verge_core::Write::Update,
            key,
            version: ObjectVersion::uid(uid),
        };
        Envelope::new(
            Module::Other("tasks".into()),
            Group::Fleet,
            kind,
            body.as_bytes().to_vec(),
        )
        .at_node(path_node)
    }

    #[test]
    fn reports_are_parsed_for_the_sessions_node_only() {
        let ok = report(
            "edge-1",
            "imageprepulljob.cache",
            "u1",
            r#"{"phase":"Successful"}"#,
        );
        let parsed = parse("edge-1", &ok).expect("valid").expect("a report");
        assert_eq!(parsed.task.kind, JobKind::ImagePrePullJob);
        assert_eq!(
            (parsed.task.job.as_str(), parsed.uid.as_str()),
            ("cache", "u1")
        );
        assert_eq!(parsed.report.phase, "Successful");
        let other = parse("edge-2", &ok).expect_err("another node's path");
        assert!(other.starts_with("forbidden"), "{other}");
        for bad in [
            report("edge-1", "podjob.x", "u1", "{}"),
            report("edge-1", "imageprepulljob.cache", "", "{}"),
            report("edge-1", "imageprepulljob.cache", "u1", "not json"),
        ] {
            assert!(parse("edge-1", &bad).is_err(), "{}", bad.path());
        }
    }
}
