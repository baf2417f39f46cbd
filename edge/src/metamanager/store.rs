//! The redb store of every object the edge holds (KubeEdge: metamanager's sqlite `meta` table).
//!
//! Table `objects`: edge path `<namespace>/<type>/<name>` -> `(uid, resourceVersion, JSON
//! bytes)`; the upstream outbox's tables live in the same file (module `outbox`), and so do
//! the cloud's last list answers (module `answers`). Every write commits (durably) before the
//! call returns, so a caller that acks after a write never acks what a crash could lose. Calls block on disk I/O: call them from
//! `tokio::task::spawn_blocking` (see [`MetaStore::blocking`]).

use crate::metamanager::error::Error as MetaError;
use std::path::Path;
use std::sync::Arc;

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};
use verge_core::{ResourceKey, ResourceType, is_newer};
use verge_proto::{Inventory, InventoryEntry};

use crate::Result;

/// `objects`: edge path -> (uid, resourceVersion, content).
const OBJECTS: TableDefinition<&str, (&str, &str, &[u8])> = TableDefinition::new("objects");

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

/// A handle to the store; cheap to clone (shares one [`Database`]).
#[derive(Clone)]
pub struct MetaStore {
    pub(crate) db: Arc<Database>,
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore").finish_non_exhaustive()
    }
}

impl MetaStore {
    /// Opens (or creates) the database file at `path` and its tables. The file is made
    /// mode 0600 (an existing one too): it holds every object received, Secrets included.
    /// The parent directory must exist.
    ///
    /// # Errors
    /// [`StoreFile`](crate::metamanager::error::Error::StoreFile) if the file cannot be opened
    /// or chmodded; [`Store`](crate::metamanager::error::Error::Store) if the database cannot
    /// be opened (e.g. locked by another edgecore).
    pub fn open(path: &Path) -> Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let file_err = |source| MetaError::StoreFile {
            path: path.to_owned(),
            source,
        };
        // Created 0600 (no window with a wider mode), then redb opens it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(file_err)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(file_err)?;
        drop(file);
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(OBJECTS)?;
        super::outbox::create_tables(&txn)?;
        super::answers::create_table(&txn)?;
        crate::apps::create_tables(&txn)?;
        txn.commit()?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Runs `f` on a clone of this store on tokio's blocking pool.
    ///
    /// # Errors
    /// What `f` returns; [`Blocking`](crate::metamanager::error::Error::Blocking) if the task panicked.
    pub async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&MetaStore) -> Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(MetaError::Blocking)?
    }

    /// Runs `f` in one write transaction of this database and commits it (durably) before
    /// returning, for modules that keep tables of their own here (devicetwin): their writes
    /// can then commit atomically with an outbox report
    /// ([`MetaStore::outbox_put_in`]). When `f` fails nothing it wrote is committed.
    ///
    /// # Errors
    /// What `f` returns; [`Store`](crate::metamanager::error::Error::Store) if the
    /// transaction cannot begin or commit.
    pub fn write<T>(&self, f: impl FnOnce(&WriteTransaction) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_write()?;
        let out = f(&txn)?;
        txn.commit()?;
        Ok(out)
    }

    /// Runs `f` in one read transaction (a consistent snapshot) of this database.
    ///
    /// # Errors
    /// What `f` returns; [`Store`](crate::metamanager::error::Error::Store) if the
    /// transaction cannot begin.
    pub fn read<T>(&self, f: impl FnOnce(&ReadTransaction) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_read()?;
        f(&txn)
    }

    /// Stores the object at `key` if nothing is stored there or `resource_version` is newer
    /// than the stored one ([`verge_core::is_newer`]); commits before returning.
    /// Returns whether it was stored (`false`: stale or duplicate, nothing changed).
    ///
    /// # Errors
    /// [`Store`](crate::metamanager::error::Error::Store) if the transaction fails; nothing is changed then.
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
    /// [`Store`](crate::metamanager::error::Error::Store) if the read fails.
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
    /// [`Store`](crate::metamanager::error::Error::Store) if the transaction fails; nothing is changed then.
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
    /// [`Store`](crate::metamanager::error::Error::Store) if the read fails; [`StoredRecord`](crate::metamanager::error::Error::StoredRecord) for a key that does not
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

    /// Every stored object's identity, for `EdgeHello.inventory` (resync by inventory).
    ///
    /// # Errors
    /// [`Store`](crate::metamanager::error::Error::Store) if the read fails; [`StoredRecord`](crate::metamanager::error::Error::StoredRecord) for a key that does not
    /// parse as an edge path.
    pub fn inventory(&self) -> Result<Inventory> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let mut entries = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let key = stored_key(k.value())?;
            let (uid, rv, _) = v.value();
            entries.push(InventoryEntry {
                r#type: key.kind.as_str().to_owned(),
                namespace: key.namespace,
                name: key.name,
                uid: uid.to_owned(),
                resource_version: rv.to_owned(),
            });
        }
        Ok(Inventory { entries })
    }
}

/// Parses a stored object's key (an edge path).
fn stored_key(raw: &str) -> Result<ResourceKey> {
    raw.parse().map_err(|source| {
        MetaError::StoredRecord {
            key: raw.to_owned(),
            source,
        }
        .into()
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
    fn inventory_lists_everything_and_survives_reopen() {
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
        let mut inv = s.inventory().expect("inventory").entries;
        inv.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(inv.len(), 2);
        assert_eq!(
            (inv[0].r#type.as_str(), inv[0].namespace.as_str()),
            ("secret", "ns")
        );
        assert_eq!(
            (inv[1].namespace.as_str(), inv[1].uid.as_str()),
            ("_", "un")
        );
        assert_eq!(inv[1].resource_version, "2");
    }

    #[test]
    fn file_is_private_even_when_it_existed_wider() {
        use std::os::unix::fs::PermissionsExt as _;
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
