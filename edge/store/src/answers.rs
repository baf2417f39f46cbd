//! The cloud's last answer to each list query (the service lists edged asks for the
//! kubelet's service environment variables, the ClusterTrustBundles of projected volumes),
//! by edge path, so that a container started while the cloud is unreachable (or after a
//! restart offline) still gets them.
//!
//! Table `answers`: edge path (`<ns>/servicelist/_`, `_/clustertrustbundle/<name>`,
//! `_/clustertrustbundlelist/<signer>`) -> the answer's content. Apart from
//! `objects`: an answer is no object with a uid and resourceVersion, is never part of the
//! inventory and is replaced by every newer answer.

use redb::{ReadableDatabase, TableDefinition, WriteTransaction};
use verge_core::ResourceKey;

use crate::MetaStore;
use crate::error::Result;

/// `answers`: edge path -> content.
const ANSWERS: TableDefinition<&str, &[u8]> = TableDefinition::new("answers");

/// Creates the table (at open).
pub(crate) fn create_table(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(ANSWERS)?;
    Ok(())
}

impl MetaStore {
    /// Keeps `content`, the cloud's answer to the query of `key`, in place of the previous
    /// one; commits before returning.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the transaction fails; nothing
    /// is changed then.
    pub fn put_answer(&self, key: &ResourceKey, content: &[u8]) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(ANSWERS)?
            .insert(key.to_string().as_str(), content)?;
        txn.commit()?;
        Ok(())
    }

    /// The last answer kept for the query of `key`, if any.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the read fails.
    pub fn answer(&self, key: &ResourceKey) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ANSWERS)?;
        Ok(table
            .get(key.to_string().as_str())?
            .map(|guard| guard.value().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_replace_each_other_survive_reopen_and_stay_out_of_the_inventory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.redb");
        let key = ResourceKey::service_list("ns");
        {
            let store = MetaStore::open(&path).expect("open");
            assert_eq!(store.answer(&key).expect("read"), None);
            store.put_answer(&key, b"one").expect("put");
            store.put_answer(&key, b"two").expect("put");
            assert!(store.identities().expect("inventory").is_empty());
        }
        let store = MetaStore::open(&path).expect("reopen");
        assert_eq!(
            store.answer(&key).expect("read").as_deref(),
            Some(&b"two"[..])
        );
        let other = ResourceKey::service_list("default");
        assert_eq!(store.answer(&other).expect("read"), None);
    }
}
