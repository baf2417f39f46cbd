//! Node lease renewal in `kube-node-lease`, as kubelet's node lease controller does it
//! (`pkg/kubelet/nodelease`, `component-helpers/apimachinery/lease`): the edge's Lease
//! message, applied once per session; the periodic renewals are [`crate::renewer`]'s.

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::{Error, Result};
use verge_core::NODE_LEASE_NAMESPACE;

/// `spec.leaseDurationSeconds` when the edge sends none (kubelet's default
/// `nodeLeaseDurationSeconds`: 40).
pub const DEFAULT_LEASE_DURATION_SECONDS: i32 = 40;

/// The renewal an edge asks for, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Renewal {
    /// `spec.holderIdentity`; defaults to the node name.
    pub holder_identity: String,
    /// `spec.leaseDurationSeconds`; defaults to [`DEFAULT_LEASE_DURATION_SECONDS`].
    pub lease_duration_seconds: i32,
    /// `spec.renewTime`; defaults to now.
    pub renew_time: MicroTime,
}

impl Renewal {
    /// The renewal carried by the edge's `lease` for `node`.
    pub fn from_lease(node: &str, lease: Lease) -> Self {
        let spec = lease.spec.unwrap_or_default();
        Self {
            holder_identity: spec.holder_identity.unwrap_or_else(|| node.to_owned()),
            lease_duration_seconds: spec
                .lease_duration_seconds
                .unwrap_or(DEFAULT_LEASE_DURATION_SECONDS),
            renew_time: spec.renew_time.unwrap_or_else(now),
        }
    }

    /// The merge patch setting the spec fields, and `metadata.ownerReferences` when `owner` is
    /// given.
    pub fn patch(&self, owner: Option<&OwnerReference>) -> Value {
        let mut patch = json!({ "spec": {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "renewTime": self.renew_time,
        }});
        if let Some(owner) = owner {
            patch["metadata"] = json!({ "ownerReferences": [owner] });
        }
        patch
    }

    /// A new Lease `node` in `kube-node-lease`, owned by `owner`.
    pub fn new_lease(&self, node: &str, owner: OwnerReference) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(node.to_owned()),
                namespace: Some(NODE_LEASE_NAMESPACE.to_owned()),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.holder_identity.clone()),
                lease_duration_seconds: Some(self.lease_duration_seconds),
                renew_time: Some(self.renew_time.clone()),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// The ownerReference kubelet puts on its lease: the Node (`v1`, `Node`, name, uid).
pub fn node_owner(node: &Node) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Node".to_owned(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

/// Now, with microsecond precision.
pub fn now() -> MicroTime {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Renews the lease of `node` with `renewal` (from the edge's Lease message, which it sends
/// once per session; [`crate::renewer`] renews it from then on): get-or-create Lease
/// `<node>` in `kube-node-lease` (owned by the Node, as kubelet sets it), then set
/// holderIdentity, leaseDurationSeconds and renewTime. An existing lease without
/// ownerReferences gets them (kubelet `setNodeOwnerFunc`) when the Node exists.
///
/// # Errors
/// [`Error::NodeNotFound`] when the lease must be created but the Node does not exist;
/// [`Error::Kube`] when the API server refuses a read or write.
pub async fn renew(client: &kube::Client, node: &str, renewal: &Renewal) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let existing = leases
        .get_opt(node)
        .await
        .map_err(Error::kube("get lease"))?;
    let owned = existing
        .as_ref()
        .and_then(|l| l.metadata.owner_references.as_ref())
        .is_some_and(|refs| !refs.is_empty());
    let owner = if owned {
        None
    } else {
        nodes
            .get_opt(node)
            .await
            .map_err(Error::kube("get node"))?
            .map(|n| node_owner(&n))
    };
    if existing.is_none() {
        let owner = owner
            .clone()
            .ok_or_else(|| Error::NodeNotFound(node.to_owned()))?;
        match leases
            .create(&PostParams::default(), &renewal.new_lease(node, owner))
            .await
        {
            Ok(_) => {
                info!("node lease created");
                return Ok(());
            }
            // Created concurrently: renew it below.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(error) => return Err(Error::kube("create lease")(error)),
        }
    }
    let patch = Patch::Merge(renewal.patch(owner.as_ref()));
    leases
        .patch(node, &PatchParams::default(), &patch)
        .await
        .map_err(Error::kube("renew lease"))?;
    debug!("node lease renewed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_spec() {
        let r = Renewal::from_lease("edge-1", Lease::default());
        assert_eq!(r.holder_identity, "edge-1");
        assert_eq!(r.lease_duration_seconds, DEFAULT_LEASE_DURATION_SECONDS);
    }

    #[test]
    fn patch_carries_spec_and_owner() {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": "edge-1" },
            "spec": { "holderIdentity": "h", "leaseDurationSeconds": 10,
                      "renewTime": "2025-01-02T03:04:05.123456Z" }
        }))
        .expect("lease");
        let r = Renewal::from_lease("edge-1", lease);
        let node = Node {
            metadata: ObjectMeta {
                name: Some("edge-1".into()),
                uid: Some("u-1".into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let patch = r.patch(Some(&node_owner(&node)));
        assert_eq!(patch["spec"]["holderIdentity"], "h");
        assert_eq!(patch["spec"]["leaseDurationSeconds"], 10);
        assert_eq!(patch["spec"]["renewTime"], "2025-01-02T03:04:05.123456Z");
        assert_eq!(patch["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert!(r.patch(None).get("metadata").is_none());
    }
}
