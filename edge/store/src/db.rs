//! The database handle: opening edgecore's redb file, transactions and the blocking pool.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, WriteTransaction};
use verge_core::Envelope;

use crate::error::{Error, Result};
use crate::twins::TwinTable;

/// redb's page cache (read cache and write buffer), bytes. redb's default is 1 GiB, which
/// lets every page ever read or written stay resident as the store grows; the operating
/// system's page cache still holds the file, this bounds only redb's own copy. With 1,000
/// Services and their EndpointSlices stored (`cargo xtask bench net`), a 4 MiB cache grew
/// edgecore by 2.4 MiB more than this one; the store's reads are point reads and short
/// lists, served from the system's page cache beyond it.
pub const CACHE_BYTES: usize = 1024 * 1024;

/// A handle to the store; cheap to clone (shares one redb [`Database`]).
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
    /// Opens (or creates) the database file at `path` and every table. The file is made
    /// mode 0600 (an existing one too): it holds every object received, Secrets included.
    /// The parent directory must exist.
    ///
    /// # Errors
    /// [`Error::StoreFile`] if the file cannot be opened or chmodded; [`Error::Store`] if
    /// the database cannot be opened (e.g. locked by another edgecore).
    pub fn open(path: &Path) -> Result<Self> {
        crate::private_dir::ensure_file(path).map_err(|source| Error::StoreFile {
            path: path.to_owned(),
            source,
        })?;
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)?;
        let txn = db.begin_write()?;
        crate::objects::create_table(&txn)?;
        crate::outbox::create_tables(&txn)?;
        crate::answers::create_table(&txn)?;
        crate::apps_inbox::create_tables(&txn)?;
        crate::twins::create_tables(&txn)?;
        txn.commit()?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Runs `f` on a clone of this store on tokio's blocking pool.
    ///
    /// # Errors
    /// What `f` returns; [`Error::Blocking`] (converted to `E`) if the task panicked.
    pub async fn blocking<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
        F: FnOnce(&MetaStore) -> Result<T, E> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| E::from(Error::Blocking(e)))?
    }

    /// Runs `f` in one write [`Transaction`] and commits it (durably) before returning, so
    /// that several tables change together: devicetwin's twin values and their
    /// `devicestatus` outbox report commit atomically. When `f` fails nothing it wrote is
    /// committed.
    ///
    /// # Errors
    /// What `f` returns; [`Error::Store`] (converted to `E`) if the transaction cannot begin
    /// or commit.
    pub fn write<T, E: From<Error>>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let txn = self.db.begin_write().map_err(Error::from)?;
        let out = f(&Transaction { txn: &txn })?;
        txn.commit().map_err(Error::from)?;
        Ok(out)
    }
}

/// One write transaction of the store ([`MetaStore::write`]): nothing it writes is visible
/// or durable until the transaction commits, and all of it commits together.
pub struct Transaction<'a> {
    txn: &'a WriteTransaction,
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").finish_non_exhaustive()
    }
}

impl Transaction<'_> {
    /// Puts the report `message` (its wire encoding `wire`) in the outbox under its key, as
    /// [`MetaStore::outbox_put`] does, inside this transaction.
    ///
    /// # Errors
    /// As [`MetaStore::outbox_put`].
    pub fn outbox_put(
        &self,
        message: &Envelope,
        wire: &[u8],
        limits: crate::OutboxLimits,
    ) -> Result<()> {
        crate::outbox::put_in(self.txn, message, wire, limits)
    }

    /// Writes `value` under `key` in devicetwin's `table`, replacing what was there.
    ///
    /// # Errors
    /// [`Error::Store`] if the table cannot be written.
    pub fn put_twin_record(&self, table: TwinTable, key: &str, value: &[u8]) -> Result<()> {
        self.txn
            .open_table(table.definition())?
            .insert(key, value)?;
        Ok(())
    }

    /// Removes `key` from devicetwin's `table` (nothing happens if it is absent).
    ///
    /// # Errors
    /// [`Error::Store`] if the table cannot be written.
    pub fn remove_twin_record(&self, table: TwinTable, key: &str) -> Result<()> {
        self.txn.open_table(table.definition())?.remove(key)?;
        Ok(())
    }
}
