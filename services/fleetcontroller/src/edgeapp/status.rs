//! An EdgeApplication's `status.workloadStatus` from what applying its objects returned.
//! Pure.

use serde_json::Value;

use super::render::{Kind, Problem};
use crate::api::edgeapp::{ManifestStatus, ResourceIdentifier};

/// `conditions` of an object that is up: a Deployment whose current generation has every
/// replica ready, any other object once applied.
pub const AVAILABLE: &str = "Available";
/// `conditions` of an object being applied or rolled out, or that could not be made.
pub const PROCESSING: &str = "Processing";

/// The status entries: one per object (`applied` holds the object the API server returned,
/// or `None` when applying it failed), plus one bare entry per manifest with a problem and no
/// object, sorted by ordinal then name.
pub fn workload_status(
    applied: &[(Kind, ResourceIdentifier, Option<Value>)],
    problems: &[Problem],
) -> Vec<ManifestStatus> {
    let mut entries: Vec<ManifestStatus> = applied
        .iter()
        .map(|(kind, id, object)| ManifestStatus {
            identifier: id.clone(),
            conditions: Some(
                match object {
                    Some(object) if available(*kind, object) => AVAILABLE,
                    _ => PROCESSING,
                }
                .to_owned(),
            ),
        })
        .collect();
    for problem in problems {
        if !entries
            .iter()
            .any(|e| e.identifier.ordinal == problem.ordinal)
        {
            entries.push(ManifestStatus {
                identifier: ResourceIdentifier {
                    ordinal: problem.ordinal,
                    ..ResourceIdentifier::default()
                },
                conditions: Some(PROCESSING.to_owned()),
            });
        }
    }
    entries.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    entries.dedup();
    entries
}

/// Whether `object` of `kind` is up.
fn available(kind: Kind, object: &Value) -> bool {
    if kind != Kind::Deployment {
        return true;
    }
    let number = |pointer: &str| object.pointer(pointer).and_then(Value::as_i64);
    let wanted = number("/spec/replicas").unwrap_or(1);
    let current = number("/status/observedGeneration") >= number("/metadata/generation");
    current
        && number("/status/readyReplicas").unwrap_or(0) >= wanted
        && number("/status/updatedReplicas").unwrap_or(0) >= wanted
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_deployment_is_available_when_its_generation_is_rolled_out() {
        let id = |name: &str, ordinal| Kind::Deployment.identifier(ordinal, "ns", name);
        let rolled = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 2}});
        let stale = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 2}});
        let status = workload_status(
            &[
                (Kind::Deployment, id("b", 0), Some(stale)),
                (Kind::Deployment, id("a", 0), Some(rolled)),
                (
                    Kind::ConfigMap,
                    Kind::ConfigMap.identifier(2, "ns", "c"),
                    Some(json!({})),
                ),
                (Kind::Deployment, id("z", 0), None),
            ],
            &[
                Problem {
                    ordinal: 1,
                    reason: "bad".into(),
                },
                Problem {
                    ordinal: 0,
                    reason: "x".into(),
                },
            ],
        );
        let summary: Vec<_> = status
            .iter()
            .map(|s| {
                (
                    s.identifier.ordinal,
                    s.identifier.name.as_str(),
                    s.conditions.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (0, "a", AVAILABLE),
                (0, "b", PROCESSING),
                (0, "z", PROCESSING),
                (1, "", PROCESSING),
                (2, "c", AVAILABLE),
            ]
        );
    }
}
