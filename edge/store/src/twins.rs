//! devicetwin's tables (in this file so that a twin write and its `devicestatus` outbox
//! report commit in one transaction). The store keeps each record as the bytes devicetwin
//! encodes (JSON); devicetwin decodes them and skips what it cannot read.
//! * `devicetwin_twins`: `<namespace>/<name>` -> the device's twin record;
//! * `devicetwin_mappers`: protocol -> the mapper that registered it last, so that after a
//!   restart edgecore calls mappers again without waiting for them to register anew;
//! * `devicetwin_sent`: protocol -> what that mapper was given, so that after a restart only
//!   the differences are sent.

use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::MetaStore;
use crate::error::Result;

const TWINS: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_twins");
const MAPPERS: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_mappers");
const SENT: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_sent");

/// One of devicetwin's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwinTable {
    /// `devicetwin_twins`: `<namespace>/<name>` -> twin record.
    Twins,
    /// `devicetwin_mappers`: protocol -> mapper record.
    Mappers,
    /// `devicetwin_sent`: protocol -> what that protocol's mapper was given.
    Sent,
}

impl TwinTable {
    /// The redb table.
    pub(crate) fn definition(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Self::Twins => TWINS,
            Self::Mappers => MAPPERS,
            Self::Sent => SENT,
        }
    }
}

/// Creates the tables (at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    for table in [TwinTable::Twins, TwinTable::Mappers, TwinTable::Sent] {
        txn.open_table(table.definition())?;
    }
    Ok(())
}

impl MetaStore {
    /// Every record of devicetwin's `table`, in key order.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the read fails.
    pub fn twin_records(&self, table: TwinTable) -> Result<Vec<(String, Vec<u8>)>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table.definition())?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (key, value) = row?;
            out.push((key.value().to_owned(), value.value().to_vec()));
        }
        Ok(out)
    }

    /// The record of `key` in devicetwin's `table`, if any.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the read fails.
    pub fn twin_record(&self, table: TwinTable, key: &str) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table.definition())?;
        Ok(table.get(key)?.map(|value| value.value().to_vec()))
    }

    /// Writes `value` under `key` in devicetwin's `table` and commits.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the transaction fails; nothing changes then.
    pub fn put_twin_record(&self, table: TwinTable, key: &str, value: &[u8]) -> Result<()> {
        self.write(|txn| txn.put_twin_record(table, key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reopen_and_removal_commits_with_the_transaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("edgecore.redb");
        {
            let store = MetaStore::open(&path).expect("open");
            store
                .put_twin_record(TwinTable::Twins, "ns/a", b"a")
                .expect("a");
            store
                .put_twin_record(TwinTable::Sent, "modbus", b"s")
                .expect("sent");
            store
                .write(|txn| {
                    txn.put_twin_record(TwinTable::Twins, "ns/b", b"b")?;
                    txn.remove_twin_record(TwinTable::Twins, "ns/a")
                })
                .expect("write");
        }
        let store = MetaStore::open(&path).expect("reopen");
        assert_eq!(
            store.twin_records(TwinTable::Twins).expect("twins"),
            [("ns/b".to_owned(), b"b".to_vec())]
        );
        assert_eq!(
            store.twin_record(TwinTable::Sent, "modbus").expect("sent"),
            Some(b"s".to_vec())
        );
        assert!(
            store
                .twin_records(TwinTable::Mappers)
                .expect("mappers")
                .is_empty()
        );
    }
}
