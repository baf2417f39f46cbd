//! devicetwin's tables in edgecore's redb file (the metamanager's database, so a twin write
//! and its `devicestatus` outbox report commit in one transaction):
//! * `devicetwin_twins`: `<namespace>/<name>` -> [`TwinRecord`] as JSON;
//! * `devicetwin_mappers`: protocol -> [`MapperRecord`] as JSON (the mapper that registered
//!   it last), so after a restart edgecore calls mappers again without waiting for them to
//!   register anew;
//! * `devicetwin_sent`: protocol -> [`Sent`] as JSON: what that mapper was given, so that
//!   after a restart only the differences are sent (and Devices deleted meanwhile are
//!   removed from it).
//!
//! Calls block on disk I/O (run them through [`MetaStore::blocking`]). An unreadable record
//! is skipped with a warning when loading, never fatal.

use std::collections::HashMap;

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use tracing::warn;
use verge_runtime::ErrorChain;

use super::devices::DeviceId;
use super::error::Error;
use super::mappers::MapperRecord;
use super::reconcile::Sent;
use super::twin::TwinRecord;
use crate::Result;
use crate::metamanager::MetaStore;

const TWINS: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_twins");
const MAPPERS: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_mappers");
const SENT: TableDefinition<&str, &[u8]> = TableDefinition::new("devicetwin_sent");

/// Creates the tables if missing.
pub(super) fn create_tables(store: &MetaStore) -> Result<()> {
    store.write(|txn| {
        txn.open_table(TWINS)?;
        txn.open_table(MAPPERS)?;
        txn.open_table(SENT)?;
        Ok(())
    })
}

/// What the mapper of `protocol` was given, as last stored (empty when unknown or
/// unreadable).
pub(super) fn load_sent(store: &MetaStore, protocol: &str) -> Result<Sent> {
    store.read(|txn| {
        let table = txn.open_table(SENT)?;
        let Some(value) = table.get(protocol)? else {
            return Ok(Sent::default());
        };
        Ok(
            serde_json::from_slice(value.value()).unwrap_or_else(|source| {
                let error = Error::Record {
                    key: protocol.to_owned(),
                    source,
                };
                warn!(error = %ErrorChain(&error), "record of what a mapper holds skipped");
                Sent::default()
            }),
        )
    })
}

/// Stores what the mapper of `protocol` was given, and commits.
pub(super) fn put_sent(store: &MetaStore, protocol: &str, sent: &Sent) -> Result<()> {
    let bytes = serde_json::to_vec(sent).map_err(|source| Error::Record {
        key: protocol.to_owned(),
        source,
    })?;
    store.write(|txn| {
        txn.open_table(SENT)?.insert(protocol, bytes.as_slice())?;
        Ok(())
    })
}

/// Every stored twin record, by device.
pub(super) fn load_twins(store: &MetaStore) -> Result<HashMap<DeviceId, TwinRecord>> {
    store.read(|txn| {
        let table = txn.open_table(TWINS)?;
        let mut out = HashMap::new();
        for row in table.iter()? {
            let (key, value) = row?;
            let key = key.value();
            let Some(id) = DeviceId::parse(key) else {
                warn!(key, "twin record with a malformed key skipped");
                continue;
            };
            match serde_json::from_slice::<TwinRecord>(value.value()) {
                Ok(record) => {
                    out.insert(id, record);
                }
                Err(source) => {
                    let error = Error::Record {
                        key: key.to_owned(),
                        source,
                    };
                    warn!(error = %ErrorChain(&error), "twin record skipped");
                }
            }
        }
        Ok(out)
    })
}

/// Writes `record` of `id` in `txn`.
pub(super) fn put_twin(txn: &WriteTransaction, id: &DeviceId, record: &TwinRecord) -> Result<()> {
    let key = id.to_string();
    let bytes = serde_json::to_vec(record).map_err(|source| Error::Record {
        key: key.clone(),
        source,
    })?;
    txn.open_table(TWINS)?
        .insert(key.as_str(), bytes.as_slice())?;
    Ok(())
}

/// Removes the record of `id` in `txn`.
pub(super) fn remove_twin(txn: &WriteTransaction, id: &DeviceId) -> Result<()> {
    txn.open_table(TWINS)?.remove(id.to_string().as_str())?;
    Ok(())
}

/// Every stored mapper.
pub(super) fn load_mappers(store: &MetaStore) -> Result<Vec<MapperRecord>> {
    store.read(|txn| {
        let table = txn.open_table(MAPPERS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (key, value) = row?;
            match serde_json::from_slice::<MapperRecord>(value.value()) {
                Ok(record) => out.push(record),
                Err(source) => {
                    let error = Error::Record {
                        key: key.value().to_owned(),
                        source,
                    };
                    warn!(error = %ErrorChain(&error), "mapper record skipped");
                }
            }
        }
        Ok(out)
    })
}

/// Stores `mapper` under its protocol (replacing the mapper that served it before) and
/// commits.
pub(super) fn put_mapper(store: &MetaStore, mapper: &MapperRecord) -> Result<()> {
    let bytes = serde_json::to_vec(mapper).map_err(|source| Error::Record {
        key: mapper.protocol.clone(),
        source,
    })?;
    store.write(|txn| {
        txn.open_table(MAPPERS)?
            .insert(mapper.protocol.as_str(), bytes.as_slice())?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reopen_and_bad_rows_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("edgecore.redb");
        let id = DeviceId::new("ns", "thermo");
        {
            let store = MetaStore::open(&path).expect("open");
            create_tables(&store).expect("tables");
            let mut record = TwinRecord::new("u1");
            record.state = "ok".into();
            store
                .write(|txn| {
                    put_twin(txn, &id, &record)?;
                    txn.open_table(TWINS)?.insert("ns/bad", &b"{oops"[..])?;
                    Ok(())
                })
                .expect("write");
            let mapper = MapperRecord {
                name: "virtual-mapper".into(),
                protocol: "virtual".into(),
                address: "/etc/kubeedge/virtual.sock".into(),
                ..MapperRecord::default()
            };
            put_mapper(&store, &mapper).expect("mapper");
        }
        let store = MetaStore::open(&path).expect("reopen");
        create_tables(&store).expect("tables again");
        let twins = load_twins(&store).expect("twins");
        assert_eq!(twins.len(), 1, "the unreadable row is skipped");
        assert_eq!(twins[&id].state, "ok");
        let mappers = load_mappers(&store).expect("mappers");
        assert_eq!(mappers[0].address, "/etc/kubeedge/virtual.sock");
        store.write(|txn| remove_twin(txn, &id)).expect("remove");
        assert!(!load_twins(&store).expect("twins").contains_key(&id));
    }
}
