//! Content fingerprints: what of an object the edge acts on, hashed. Pure, no I/O.
//!
//! Every write to an object changes its resourceVersion, including the edge's own pod status
//! reports. Sending a pod down again for each of them would echo the edge's status back to
//! it (KubeEdge avoids this with `isPodUpdated`, comparing the pod without its status). A
//! fingerprint is a hash of the object's JSON without `status`, `metadata.resourceVersion`,
//! `metadata.generation` and `metadata.managedFields`: two versions with the same
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
            fields.remove("status");
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
