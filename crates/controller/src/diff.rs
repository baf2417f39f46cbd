//! What to send to a node so that it holds what it should: object versions and the
//! desired-vs-held diff of a resync by inventory (architecture.md §3.2). Pure, no I/O.
//!
//! Each controller decides which objects a node should hold (its *desired* set) and which
//! resource types it manages; this module compares that set with what the node *holds* (its
//! inventory on connect, then what was sent since).

use std::collections::BTreeMap;

use verge_core::{ResourceKey, ResourceType};
use verge_proto::Inventory;

/// The identity of one copy of an object: `metadata.uid` and `metadata.resourceVersion`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Version {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` (empty when unknown).
    pub resource_version: String,
}

impl Version {
    /// A version from uid and resourceVersion.
    pub fn new(uid: impl Into<String>, resource_version: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            resource_version: resource_version.into(),
        }
    }

    /// The version of an object's metadata (missing fields are empty).
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self::new(
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        )
    }
}

/// Objects by key with their versions: what a node should hold or holds.
pub type Versions = BTreeMap<ResourceKey, Version>;

/// What to send to a node so that it holds the desired objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Keys to send an `update` for: missing from `held`, or held at another uid or
    /// resourceVersion.
    pub updates: Vec<ResourceKey>,
    /// Held keys (of managed types) that are not desired, with the held uid: send `delete`.
    pub deletes: Vec<(ResourceKey, String)>,
}

impl Diff {
    /// Whether nothing needs to be sent.
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty() && self.deletes.is_empty()
    }
}

/// The messages that bring a node holding `held` to `desired`: an update for every desired
/// key not held at its version, a delete for every held key of a `managed` type that is not
/// desired (held objects of other types belong to other controllers and are never
/// touched). A key held at the desired uid but another resourceVersion is left out when
/// `same_content(key, held_version)` says that what the node holds does not differ from
/// the desired object in anything the edge acts on (only its status changed, see
/// [`crate::fingerprint`]).
pub fn diff_by_content(
    desired: &Versions,
    held: &Versions,
    managed: impl Fn(ResourceType) -> bool,
    mut same_content: impl FnMut(&ResourceKey, &Version) -> bool,
) -> Diff {
    let updates = desired
        .iter()
        .filter(|(key, version)| match held.get(*key) {
            None => true,
            Some(h) if h == *version => false,
            Some(h) => h.uid != version.uid || !same_content(key, h),
        })
        .map(|(key, _)| key.clone())
        .collect();
    let deletes = held
        .iter()
        .filter(|(key, _)| managed(key.kind) && !desired.contains_key(*key))
        .map(|(key, version)| (key.clone(), version.uid.clone()))
        .collect();
    Diff { updates, deletes }
}

/// The entries of `inventory` that `wanted` selects, by key.
///
/// Entries whose namespace and name do not form a valid resource path (a `/`, whitespace or
/// a control character in them, an empty one) are left out: no object of the cluster has
/// such a key, and a `delete` of it would carry a path cloudhub refuses, ending the
/// controller's stream (found by the `inventory` fuzz target, docs/fuzzing.md).
pub fn held_from_inventory(
    inventory: &Inventory,
    wanted: impl Fn(&ResourceKey) -> bool,
) -> Versions {
    inventory
        .entries
        .iter()
        .filter_map(|e| {
            let path = format!("{}/{}/{}", e.namespace, e.r#type, e.name);
            let key: ResourceKey = path.parse().ok()?;
            wanted(&key).then(|| (key, Version::new(e.uid.clone(), e.resource_version.clone())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, kind: ResourceType) -> ResourceKey {
        ResourceKey::new("ns", kind, name)
    }

    #[test]
    fn only_managed_types_are_deleted() {
        let held = Versions::from([
            (key("a", ResourceType::Device), Version::new("u1", "1")),
            (key("p", ResourceType::Pod), Version::new("u2", "1")),
        ]);
        let desired = Versions::new();
        let d = diff_by_content(&desired, &held, |k| k == ResourceType::Device, |_, _| false);
        assert_eq!(
            d.deletes,
            [(key("a", ResourceType::Device), "u1".to_owned())]
        );
        assert!(d.updates.is_empty());
    }

    #[test]
    fn same_content_skips_a_new_resource_version() {
        let k = key("a", ResourceType::Device);
        let held = Versions::from([(k.clone(), Version::new("u1", "1"))]);
        let desired = Versions::from([(k.clone(), Version::new("u1", "2"))]);
        let all = |_| true;
        assert!(diff_by_content(&desired, &held, all, |_, _| true).is_empty());
        assert_eq!(
            diff_by_content(&desired, &held, all, |_, _| false).updates,
            std::slice::from_ref(&k)
        );
        // Another uid is always sent.
        let replaced = Versions::from([(k.clone(), Version::new("u2", "2"))]);
        assert_eq!(
            diff_by_content(&replaced, &held, all, |_, _| true).updates,
            [k]
        );
    }
}
