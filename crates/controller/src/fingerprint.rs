//! Content fingerprints: what of an object the edge acts on, hashed. Pure, no I/O.
//!
//! Every write to an object changes its resourceVersion, including the edge's own pod status
//! reports. Sending a pod down again for each of them would echo the edge's status back to
//! it (KubeEdge avoids this with `isPodUpdated`, comparing the pod without its status). A
//! fingerprint is a hash of the object's JSON without `status` (except the conditions a pod's
//! readiness gates name, which the edge's Ready condition depends on),
//! `metadata.resourceVersion`, `metadata.generation` and `metadata.managedFields`: two
//! versions with the same
//! fingerprint differ only in what the edge does not act on (spec, labels, annotations, deletionTimestamp,
//! deletionGracePeriodSeconds, ownerReferences, finalizers... are all covered).
//!
//! Fingerprints are compared only within one controller process (the hasher is
//! deterministic, but not guaranteed stable across Rust releases), so they are never sent
//! or stored.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Serialize;
use serde_json::Value;

/// The fingerprint of an object's content (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// The fingerprint of `object`: its JSON without `status`, `metadata.resourceVersion`,
    /// `metadata.generation` (custom resources without a status subresource, such as
    /// KubeEdge's Device, count status writes as generations) and `metadata.managedFields`. Object keys are serialized in a fixed order (serde
    /// structs in declaration order, maps sorted), so equal content hashes equally.
    pub fn of<T: Serialize>(object: &T) -> Self {
        let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut value {
            let gates = readiness_gate_statuses(fields);
            fields.remove("status");
            if !gates.is_empty() {
                fields.insert("readinessGateStatuses".to_owned(), Value::Array(gates));
            }
            if let Some(Value::Object(meta)) = fields.get_mut("metadata") {
                meta.remove("resourceVersion");
                meta.remove("generation");
                meta.remove("managedFields");
            }
        }
        let mut hasher = DefaultHasher::new();
        value.to_string().hash(&mut hasher);
        Self(hasher.finish())
    }
}

/// `[type, status]` of each status condition that a pod readiness gate
/// (`spec.readinessGates[].conditionType`) names: the one part of a pod's status the edge acts
/// on (the kubelet's Ready condition waits for them), written by whoever owns the gate.
fn readiness_gate_statuses(fields: &serde_json::Map<String, Value>) -> Vec<Value> {
    let Some(Value::Array(gates)) = fields.get("spec").and_then(|s| s.get("readinessGates")) else {
        return Vec::new();
    };
    let types: Vec<&Value> = gates
        .iter()
        .filter_map(|g| g.get("conditionType"))
        .collect();
    let Some(Value::Array(conditions)) = fields.get("status").and_then(|s| s.get("conditions"))
    else {
        return Vec::new();
    };
    conditions
        .iter()
        .filter(|c| c.get("type").is_some_and(|t| types.contains(&t)))
        .map(|c| {
            Value::Array(vec![
                c.get("type").cloned().unwrap_or(Value::Null),
                c.get("status").cloned().unwrap_or(Value::Null),
            ])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn pod(rv: &str, extra: Value) -> Pod {
        let mut v = json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                "labels": { "a": "1" } },
            "spec": { "nodeName": "edge-1", "containers": [{ "name": "c", "image": "i" }] },
        });
        if let (Value::Object(base), Value::Object(extra)) = (&mut v, extra) {
            for (k, e) in extra {
                match (base.get_mut(&k), e) {
                    (Some(Value::Object(b)), Value::Object(e)) => b.extend(e),
                    (_, e) => {
                        base.insert(k, e);
                    }
                }
            }
        }
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn status_and_resource_version_do_not_count() {
        let base = Fingerprint::of(&pod("1", json!({})));
        let status = pod("2", json!({ "status": { "phase": "Running" } }));
        assert_eq!(Fingerprint::of(&status), base);
        let fields = pod(
            "3",
            json!({ "metadata": { "managedFields": [{ "manager": "x" }], "generation": 4 } }),
        );
        assert_eq!(Fingerprint::of(&fields), base);
    }

    #[test]
    fn readiness_gate_conditions_count() {
        let gated = |conditions: Value| {
            pod(
                "1",
                json!({
                    "spec": { "readinessGates": [{ "conditionType": "k8s.io/gate" }] },
                    "status": { "conditions": conditions },
                }),
            )
        };
        let unset = Fingerprint::of(&gated(json!([{ "type": "Ready", "status": "False" }])));
        let other = Fingerprint::of(&gated(json!([{ "type": "Ready", "status": "True" }])));
        assert_eq!(unset, other, "conditions no gate names do not count");
        let open = Fingerprint::of(&gated(json!([{ "type": "k8s.io/gate", "status": "True" }])));
        let shut = Fingerprint::of(&gated(
            json!([{ "type": "k8s.io/gate", "status": "False" }]),
        ));
        assert_ne!(open, unset);
        assert_ne!(open, shut);
    }

    #[test]
    fn what_the_edge_acts_on_counts() {
        let base = Fingerprint::of(&pod("1", json!({})));
        let changes = [
            json!({ "metadata": { "labels": { "a": "2" } } }),
            json!({ "metadata": { "annotations": { "x": "y" } } }),
            json!({ "metadata": { "deletionTimestamp": "2024-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30 } }),
            json!({ "metadata": { "ownerReferences": [{ "apiVersion": "v1", "kind": "X",
                "name": "o", "uid": "o" }] } }),
            json!({ "spec": { "containers": [{ "name": "c", "image": "j" }] } }),
            json!({ "spec": { "tolerations": [{ "key": "k", "operator": "Exists" }] } }),
        ];
        for change in changes {
            let changed = pod("2", change.clone());
            assert_ne!(Fingerprint::of(&changed), base, "{change}");
        }
    }
}
