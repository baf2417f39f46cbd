//! Table `objects`: every object the edge holds (KubeEdge: metamanager's sqlite `meta`
//! table), edge path `<namespace>/<type>/<name>` -> `(uid, resourceVersion, JSON bytes)`.

use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use verge_core::{ResourceKey, ResourceType, is_newer};

use crate::MetaStore;
use crate::error::{Error, Result};

/// `objects`: edge path -> (uid, resourceVersion, content).
const OBJECTS: TableDefinition<&str, (&str, &str, &[u8])> = TableDefinition::new("objects");

/// Creates the table (at open).
pub(crate) fn create_table(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(OBJECTS)?;
    Ok(())
}

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// Kubernetes `metadata.uid`.
    pub uid: String,
    /// Kubernetes `metadata.resourceVersion`.
    pub resource_version: String,
    /// The object's JSON, as received.
    pub content: Vec<u8>,
}

impl StoredObject {
    /// An `objects` row's value.
    fn from_row((uid, resource_version, content): (&str, &str, &[u8])) -> Self {
        Self {
            uid: uid.to_owned(),
            resource_version: resource_version.to_owned(),
            content: content.to_vec(),
        }
    }
}

impl MetaStore {
    /// Stores the object at `key` if nothing is stored there or `resource_version` is newer
    /// than the stored one ([`verge_core::is_newer`]); commits before returning.
    /// Returns whether it was stored (`false`: stale or duplicate, nothing changed).
    ///
    /// # Errors
    /// [`Error::Store`] if the transaction fails; nothing is changed then.
    pub fn upsert_if_newer(
        &self,
        key: &ResourceKey,
        uid: &str,
        resource_version: &str,
        content: &[u8],
    ) -> Result<bool> {
        let path = key.to_string();
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(OBJECTS)?;
            if let Some(stored) = table.get(path.as_str())? {
                let (_, stored_rv, _) = stored.value();
                if !is_newer(resource_version, stored_rv) {
                    return Ok(false);
                }
            }
            table.insert(path.as_str(), (uid, resource_version, content))?;
        }
        txn.commit()?;
        Ok(true)
    }

    /// The object at `key`, if any.
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails.
    pub fn get(&self, key: &ResourceKey) -> Result<Option<StoredObject>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        Ok(table
            .get(key.to_string().as_str())?
            .map(|guard| StoredObject::from_row(guard.value())))
    }

    /// Removes the object at `key` unless `uid` is non-empty and differs from the stored uid
    /// (a delete of an older incarnation must not remove a recreated object). Commits before
    /// returning; returns whether something was removed.
    ///
    /// # Errors
    /// [`Error::Store`] if the transaction fails; nothing is changed then.
    pub fn delete(&self, key: &ResourceKey, uid: &str) -> Result<bool> {
        let path = key.to_string();
        let txn = self.db.begin_write()?;
        let removed = {
            let mut table = txn.open_table(OBJECTS)?;
            let matches = match table.get(path.as_str())? {
                None => false,
                Some(stored) => {
                    let (stored_uid, _, _) = stored.value();
                    uid.is_empty() || stored_uid.is_empty() || stored_uid == uid
                }
            };
            if matches {
                table.remove(path.as_str())?;
            }
            matches
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Every stored object of type `kind`, with its key, in key order.
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails; [`Error::StoredRecord`] for a key that does not
    /// parse as an edge path.
    pub fn list(&self, kind: ResourceType) -> Result<Vec<(ResourceKey, StoredObject)>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let key = stored_key(k.value())?;
            if key.kind != kind {
                continue;
            }
            out.push((key, StoredObject::from_row(v.value())));
        }
        Ok(out)
    }

    /// Every stored object's identity, in key order, for the reconnect inventory
    /// (`EdgeHello.inventory`: resync by inventory).
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails; [`Error::StoredRecord`] for a key that does not
    /// parse as an edge path.
    pub fn identities(&self) -> Result<Vec<ObjectIdentity>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let (uid, resource_version, _) = v.value();
            out.push(ObjectIdentity {
                key: stored_key(k.value())?,
                uid: uid.to_owned(),
                resource_version: resource_version.to_owned(),
            });
        }
        Ok(out)
    }
}

/// What identifies a stored object's version: its key, uid and resourceVersion (one entry of
/// the inventory edgehub sends when it connects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIdentity {
    /// The edge path.
    pub key: ResourceKey,
    /// Kubernetes `metadata.uid`.
    pub uid: String,
    /// Kubernetes `metadata.resourceVersion`.
    pub resource_version: String,
}

/// Parses a stored object's key (an edge path).
fn stored_key(raw: &str) -> Result<ResourceKey> {
    raw.parse().map_err(|source| Error::StoredRecord {
        key: raw.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("open");
        (dir, store)
    }

    #[test]
    fn upsert_if_newer_ignores_stale_and_duplicates() {
        let (_dir, s) = store();
        let key = ResourceKey::new("default", ResourceType::Pod, "web");
        assert!(
            s.upsert_if_newer(&key, "u1", "10", b"{\"v\":10}")
                .expect("insert")
        );
        assert!(
            !s.upsert_if_newer(&key, "u1", "10", b"{\"v\":10}")
                .expect("duplicate")
        );
        assert!(
            !s.upsert_if_newer(&key, "u1", "9", b"{\"v\":9}")
                .expect("stale")
        );
        assert!(
            s.upsert_if_newer(&key, "u1", "11", b"{\"v\":11}")
                .expect("newer")
        );
        let got = s.get(&key).expect("get").expect("present");
        assert_eq!(
            (got.resource_version.as_str(), got.content.as_slice()),
            ("11", &b"{\"v\":11}"[..])
        );
    }

    #[test]
    fn delete_respects_uid() {
        let (_dir, s) = store();
        let key = ResourceKey::new("default", ResourceType::ConfigMap, "cfg");
        s.upsert_if_newer(&key, "new-uid", "5", b"{}")
            .expect("insert");
        assert!(!s.delete(&key, "old-uid").expect("stale delete"));
        assert!(s.get(&key).expect("get").is_some());
        assert!(s.delete(&key, "new-uid").expect("delete"));
        assert!(s.get(&key).expect("get").is_none());
        assert!(!s.delete(&key, "").expect("absent"));
    }

    #[test]
    fn identities_list_everything_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("edgecore.redb");
        {
            let s = MetaStore::open(&path).expect("open");
            s.upsert_if_newer(
                &ResourceKey::new("ns", ResourceType::Secret, "a"),
                "ua",
                "1",
                b"{}",
            )
            .expect("a");
            s.upsert_if_newer(
                &ResourceKey::cluster(ResourceType::Node, "n"),
                "un",
                "2",
                b"{}",
            )
            .expect("n");
        }
        let s = MetaStore::open(&path).expect("reopen");
        let mut inv = s.identities().expect("inventory");
        inv.sort_by(|a, b| a.key.name.cmp(&b.key.name));
        assert_eq!(inv.len(), 2);
        assert_eq!(
            (inv[0].key.kind, inv[0].key.namespace.as_str()),
            (ResourceType::Secret, "ns")
        );
        assert_eq!(
            (inv[1].key.namespace.as_str(), inv[1].uid.as_str()),
            ("_", "un")
        );
        assert_eq!(inv[1].resource_version, "2");
    }

    #[test]
    fn file_is_private_even_when_it_existed_wider() {
        use std::os::unix::fs::PermissionsExt as _;
        use std::path::Path;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("edgecore.redb");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        drop(MetaStore::open(&path).expect("create"));
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        drop(MetaStore::open(&path).expect("reopen"));
        assert_eq!(mode(&path), 0o600, "an existing file is fixed");
    }
}
