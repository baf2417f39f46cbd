//! devicetwin's records in the edge store's tables ([`TwinTable`]; the store's file, so a twin
//! write and its `devicestatus` outbox report commit in one transaction), as JSON:
//! * [`TwinTable::Twins`]: `<namespace>/<name>` -> [`TwinRecord`];
//! * [`TwinTable::Mappers`]: protocol -> [`MapperRecord`] (the mapper that registered it
//!   last), so after a restart edgecore calls mappers again without waiting for them to
//!   register anew;
//! * [`TwinTable::Sent`]: protocol -> [`Sent`]: what that mapper was given, so that after a
//!   restart only the differences are sent (and Devices deleted meanwhile are removed from
//!   it).
//!
//! Calls block on disk I/O (run them through [`MetaStore::blocking`]). An unreadable record
//! is skipped with a warning when loading, never fatal.

use std::collections::HashMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;
use verge_edge_store::{MetaStore, Transaction, TwinTable};
use verge_runtime::ErrorChain;

use super::devices::DeviceId;
use super::error::Error;
use super::mappers::MapperRecord;
use super::reconcile::Sent;
use super::twin::TwinRecord;
use crate::error::Result;

/// `value` as a record's JSON.
fn encode(key: &str, value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| Error::Record {
        key: key.to_owned(),
        source,
    })
}

/// The record `bytes` of `key`, or `None` (with a warning naming `what`) when unreadable.
fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8], what: &'static str) -> Option<T> {
    serde_json::from_slice(bytes)
        .map_err(|source| {
            let error = Error::Record {
                key: key.to_owned(),
                source,
            };
            warn!(error = %ErrorChain(&error), "{what} record skipped");
        })
        .ok()
}

/// What the mapper of `protocol` was given, as last stored (empty when unknown or
/// unreadable).
pub(super) fn load_sent(store: &MetaStore, protocol: &str) -> Result<Sent> {
    Ok(store
        .twin_record(TwinTable::Sent, protocol)?
        .and_then(|bytes| decode(protocol, &bytes, "what a mapper holds"))
        .unwrap_or_default())
}

/// Stores what the mapper of `protocol` was given, and commits.
pub(super) fn put_sent(store: &MetaStore, protocol: &str, sent: &Sent) -> Result<()> {
    let bytes = encode(protocol, sent)?;
    Ok(store.put_twin_record(TwinTable::Sent, protocol, &bytes)?)
}

/// Every stored twin record, by device.
pub(super) fn load_twins(store: &MetaStore) -> Result<HashMap<DeviceId, TwinRecord>> {
    let mut out = HashMap::new();
    for (key, bytes) in store.twin_records(TwinTable::Twins)? {
        let Some(id) = DeviceId::parse(&key) else {
            warn!(key, "twin record with a malformed key skipped");
            continue;
        };
        if let Some(record) = decode(&key, &bytes, "twin") {
            out.insert(id, record);
        }
    }
    Ok(out)
}

/// Writes `record` of `id` in `txn`.
pub(super) fn put_twin(txn: &Transaction<'_>, id: &DeviceId, record: &TwinRecord) -> Result<()> {
    let key = id.to_string();
    let bytes = encode(&key, record)?;
    Ok(txn.put_twin_record(TwinTable::Twins, &key, &bytes)?)
}

/// Removes the record of `id` in `txn`.
pub(super) fn remove_twin(txn: &Transaction<'_>, id: &DeviceId) -> Result<()> {
    Ok(txn.remove_twin_record(TwinTable::Twins, &id.to_string())?)
}

/// Every stored mapper.
pub(super) fn load_mappers(store: &MetaStore) -> Result<Vec<MapperRecord>> {
    Ok(store
        .twin_records(TwinTable::Mappers)?
        .into_iter()
        .filter_map(|(key, bytes)| decode(&key, &bytes, "mapper"))
        .collect())
}

/// Stores `mapper` under its protocol (replacing the mapper that served it before) and
/// commits.
pub(super) fn put_mapper(store: &MetaStore, mapper: &MapperRecord) -> Result<()> {
    let bytes = encode(&mapper.protocol, mapper)?;
    Ok(store.put_twin_record(TwinTable::Mappers, &mapper.protocol, &bytes)?)
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
            let mut record = TwinRecord::new("u1");
            record.state = "ok".into();
            store
                .write(|txn| {
                    put_twin(txn, &id, &record)?;
                    txn.put_twin_record(TwinTable::Twins, "ns/bad", b"{oops")?;
                    Ok::<_, crate::error::Error>(())
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
        let twins = load_twins(&store).expect("twins");
        assert_eq!(twins.len(), 1, "the unreadable row is skipped");
        assert_eq!(twins[&id].state, "ok");
        let mappers = load_mappers(&store).expect("mappers");
        assert_eq!(mappers[0].address, "/etc/kubeedge/virtual.sock");
        store.write(|txn| remove_twin(txn, &id)).expect("remove");
        assert!(!load_twins(&store).expect("twins").contains_key(&id));
    }
}
