//! [`Mappers`]: the mappers that registered (DMI `MapperRegister`), one per protocol (the
//! newest registration of a protocol wins, as in KubeEdge), persisted in redb so that after
//! an edgecore restart their devices are served again without waiting for a new
//! registration.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use super::state;
use crate::error::Result;
use verge_edge_store::MetaStore;

/// A registered mapper (DMI `MapperInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MapperRecord {
    /// The mapper's name.
    pub name: String,
    /// The mapper's version.
    #[serde(default)]
    pub version: String,
    /// The DMI API version it speaks (e.g. `v1beta1`).
    #[serde(default)]
    pub api_version: String,
    /// The protocol it serves; Devices with this `spec.protocol.protocolName` go to it.
    pub protocol: String,
    /// Its `DeviceMapperService` socket: a filesystem path (not a URL).
    pub address: String,
    /// The state it reported at registration (e.g. `OK`).
    #[serde(default)]
    pub state: String,
}

/// The registry; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Mappers {
    by_protocol: Arc<RwLock<BTreeMap<String, MapperRecord>>>,
}

impl Mappers {
    /// The registry holding what `store` holds (blocking).
    ///
    /// # Errors
    /// Store failures.
    pub(super) fn load(store: &MetaStore) -> Result<Self> {
        let mappers = Self::default();
        {
            let mut map = mappers.write();
            for record in state::load_mappers(store)? {
                map.insert(record.protocol.clone(), record);
            }
        }
        Ok(mappers)
    }

    /// Makes `record` the mapper of its protocol and commits it to `store` (blocking).
    ///
    /// # Errors
    /// Store failures: the mapper is registered all the same (a mapper exits on a failed
    /// registration), only not remembered across a restart.
    pub(super) fn register(&self, store: &MetaStore, record: MapperRecord) -> Result<()> {
        self.write().insert(record.protocol.clone(), record.clone());
        state::put_mapper(store, &record)
    }

    /// The mapper serving `protocol`.
    pub fn get(&self, protocol: &str) -> Option<MapperRecord> {
        self.read().get(protocol).cloned()
    }

    /// Every registered mapper.
    pub fn all(&self) -> Vec<MapperRecord> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, MapperRecord>> {
        self.by_protocol
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, MapperRecord>> {
        self.by_protocol
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
