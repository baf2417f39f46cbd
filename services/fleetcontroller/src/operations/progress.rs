//! How a job moves on (pure, on the status as JSON so that it serves every kind and keeps
//! fields it does not know): nodes start in name order as `concurrency` allows, a node's
//! report updates its entry, and the job's phase follows its nodes' (KubeEdge's rules).

use serde_json::{Value, json};
use verge_core::task::{JobKind, NodeTaskReport};

use crate::api::operations::{JobPhase, NodeTaskPhase};

/// A node's phase in a status entry (`Pending` when absent or unknown).
fn phase_of(entry: &Value) -> NodeTaskPhase {
    serde_json::from_value(entry["phase"].clone()).unwrap_or_default()
}

/// The job's phase from its nodes': `Failure` when it has none or more than `tolerate` of them
/// failed (as a fraction), else `Complated` when every node ended, `InProgress` once one has
/// started, `Init` before.
pub fn job_phase(phases: &[NodeTaskPhase], tolerate: f64) -> JobPhase {
    let count = |p: NodeTaskPhase| phases.iter().filter(|&&q| q == p).count();
    let (total, failed) = (phases.len(), count(NodeTaskPhase::Failure));
    let succeeded = count(NodeTaskPhase::Successful);
    #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
    let failed_ratio = if total == 0 {
        1.0
    } else {
        failed as f64 / total as f64
    };
    if total == 0 || failed_ratio > tolerate {
        JobPhase::Failure
    } else if failed + succeeded == total {
        JobPhase::Completed
    } else if failed + succeeded + count(NodeTaskPhase::InProgress) > 0 {
        JobPhase::InProgress
    } else {
        JobPhase::Init
    }
}

/// Moves `status` (a job's, with `nodeStatus` entries) on: unless the job failed already,
/// while fewer than `concurrency` nodes are `InProgress`, the next `Pending` nodes by name
/// become `InProgress` (their task is sent); then the job's phase (and, when it failed because of its nodes, its reason) is set
/// from the nodes'. Returns whether anything changed. A job in a final phase is left alone.
pub fn advance(status: &mut Value, concurrency: u32, tolerate: f64) -> bool {
    let before = status.clone();
    let old: JobPhase = serde_json::from_value(status["phase"].clone()).unwrap_or_default();
    if old.is_final() {
        return false;
    }
    let Some(entries) = status["nodeStatus"].as_array_mut() else {
        return false;
    };
    let mut phases: Vec<NodeTaskPhase> = entries.iter().map(phase_of).collect();
    // A job that failed starts no more nodes.
    if job_phase(&phases, tolerate) != JobPhase::Failure {
        let running = phases
            .iter()
            .filter(|&&p| p == NodeTaskPhase::InProgress)
            .count();
        let free = usize::try_from(concurrency)
            .unwrap_or(usize::MAX)
            .saturating_sub(running);
        let mut pending: Vec<usize> = (0..entries.len())
            .filter(|&i| phases[i] == NodeTaskPhase::Pending)
            .collect();
        pending.sort_by(|&a, &b| {
            entries[a]["nodeName"]
                .as_str()
                .cmp(&entries[b]["nodeName"].as_str())
        });
        for i in pending.into_iter().take(free) {
            entries[i]["phase"] = json!(NodeTaskPhase::InProgress);
            phases[i] = NodeTaskPhase::InProgress;
        }
    }
    let phase = job_phase(&phases, tolerate);
    status["phase"] = json!(phase);
    if phase == JobPhase::Failure && !phases.is_empty() {
        let failed = phases
            .iter()
            .filter(|&&p| p == NodeTaskPhase::Failure)
            .count();
        status["reason"] = json!(format!(
            "{failed} of {} nodes failed, more than failureTolerate allows",
            phases.len()
        ));
    }
    *status != before
}

/// Why a node's report cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The job does not list the node.
    #[error("the job does not select node {0:?}")]
    NotSelected(String),
    /// The report's phase is not `InProgress`, `Successful` or `Failure`.
    #[error("phase {0:?} is not InProgress, Successful or Failure")]
    Phase(String),
}

/// Writes `report` of `node` into its entry of `status` (a job of `kind`): phase, reason,
/// action flow, and the kind's own fields (images of a pre-pull, versions of an upgrade). A
/// report for a node whose entry already ended is ignored (a late or repeated report).
/// Returns whether the entry changed.
///
/// # Errors
/// [`ReportError`] when the job does not list the node or the phase is not one a node
/// reports.
pub fn apply_report(
    status: &mut Value,
    kind: JobKind,
    node: &str,
    report: &NodeTaskReport,
) -> Result<bool, ReportError> {
    let phase = match report.phase.as_str() {
        "InProgress" => NodeTaskPhase::InProgress,
        "Successful" => NodeTaskPhase::Successful,
        "Failure" => NodeTaskPhase::Failure,
        other => return Err(ReportError::Phase(other.to_owned())),
    };
    let entry = status["nodeStatus"]
        .as_array_mut()
        .and_then(|entries| entries.iter_mut().find(|e| e["nodeName"] == node))
        .ok_or_else(|| ReportError::NotSelected(node.to_owned()))?;
    let current = phase_of(entry);
    if matches!(current, NodeTaskPhase::Successful | NodeTaskPhase::Failure) {
        return Ok(false);
    }
    let before = entry.clone();
    entry["phase"] = json!(phase);
    entry["reason"] = json!(report.reason);
    entry["actionFlow"] = json!(report.action_flow);
    match kind {
        JobKind::ImagePrePullJob => entry["imageStatus"] = json!(report.image_status),
        JobKind::NodeUpgradeJob => {
            entry["currentVersion"] = json!(report.current_version);
            entry["historicVersion"] = json!(report.historic_version);
        }
        JobKind::ConfigUpdateJob => {}
    }
    Ok(*entry != before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verge_core::task::ImageReport;

    fn status(phases: &[(&str, &str)]) -> Value {
        let entries: Vec<Value> = phases
            .iter()
            .map(|(n, p)| json!({"nodeName": n, "phase": p}))
            .collect();
        json!({"phase": "Init", "nodeStatus": entries})
    }

    fn phases(status: &Value) -> Vec<(String, String)> {
        status["nodeStatus"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["nodeName"].as_str().unwrap_or_default().to_owned(),
                    e["phase"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn nodes_start_in_name_order_as_concurrency_allows() {
        let mut s = status(&[("c", "Pending"), ("a", "Pending"), ("b", "Pending")]);
        assert!(advance(&mut s, 2, 0.1));
        assert_eq!(s["phase"], "InProgress");
        let started: Vec<String> = phases(&s)
            .into_iter()
            .filter(|(_, p)| p == "InProgress")
            .map(|(n, _)| n)
            .collect();
        assert_eq!(started, ["a", "b"]);
        assert!(!advance(&mut s, 2, 0.1), "nothing more until a node ends");
        let report = NodeTaskReport {
            phase: "Successful".into(),
            image_status: vec![ImageReport {
                image: "busybox".into(),
                status: "True".into(),
                reason: String::new(),
            }],
            ..NodeTaskReport::default()
        };
        assert_eq!(
            apply_report(&mut s, JobKind::ImagePrePullJob, "a", &report),
            Ok(true)
        );
        assert!(advance(&mut s, 2, 0.1));
        assert!(phases(&s).contains(&("c".into(), "InProgress".into())));
        for node in ["b", "c"] {
            apply_report(&mut s, JobKind::ImagePrePullJob, node, &report).expect("selected");
        }
        advance(&mut s, 2, 0.1);
        assert_eq!(s["phase"], "Complated");
        assert!(!advance(&mut s, 2, 0.1), "a final job stays");
        assert_eq!(s["nodeStatus"][1]["imageStatus"][0]["status"], "True");
    }

    #[test]
    fn reports_are_checked_and_final_entries_kept() {
        let mut s = status(&[("a", "InProgress")]);
        let failed = NodeTaskReport {
            phase: "Failure".into(),
            reason: "pull failed".into(),
            ..NodeTaskReport::default()
        };
        assert_eq!(
            apply_report(&mut s, JobKind::ConfigUpdateJob, "z", &failed),
            Err(ReportError::NotSelected("z".into()))
        );
        let odd = NodeTaskReport {
            phase: "Done".into(),
            ..NodeTaskReport::default()
        };
        assert!(apply_report(&mut s, JobKind::ConfigUpdateJob, "a", &odd).is_err());
        assert_eq!(
            apply_report(&mut s, JobKind::ConfigUpdateJob, "a", &failed),
            Ok(true)
        );
        let late = NodeTaskReport {
            phase: "InProgress".into(),
            ..NodeTaskReport::default()
        };
        assert_eq!(
            apply_report(&mut s, JobKind::ConfigUpdateJob, "a", &late),
            Ok(false)
        );
        advance(&mut s, 1, 0.1);
        assert_eq!(s["phase"], "Failure");
        assert_eq!(
            s["reason"],
            "1 of 1 nodes failed, more than failureTolerate allows"
        );
    }

    #[test]
    fn the_job_phase_follows_failure_tolerate() {
        use NodeTaskPhase::{Failure, InProgress, Pending, Successful};
        assert_eq!(job_phase(&[], 0.1), JobPhase::Failure);
        let mut ten = vec![Pending; 10];
        ten[0] = Failure;
        assert_eq!(job_phase(&ten, 0.1), JobPhase::InProgress);
        ten[1] = Failure;
        assert_eq!(job_phase(&ten, 0.1), JobPhase::Failure);
        assert_eq!(job_phase(&[Pending, Pending], 0.1), JobPhase::Init);
        assert_eq!(job_phase(&[InProgress, Pending], 0.1), JobPhase::InProgress);
        assert_eq!(
            job_phase(&[Successful, Successful], 0.0),
            JobPhase::Completed
        );
        assert_eq!(job_phase(&[Successful, Failure], 0.5), JobPhase::Completed);
    }
}
