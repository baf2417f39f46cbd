//! [`Mappers`]: the mappers that registered (DMI `MapperRegister`), one per protocol (the
//! newest registration of a protocol wins, as in KubeEdge), persisted in redb so that after
//! an edgecore restart their devices are served again without waiting for a new
//! registration. Registrations are announced to the reconciler.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::state;
use crate::Result;
use crate::metamanager::MetaStore;

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

/// Capacity of the registration broadcast; a lagging reconciler re-reads every mapper.
const CAPACITY: usize = 64;

/// The registry; cheap to clone.
#[derive(Debug, Clone)]
pub struct Mappers {
    by_protocol: Arc<RwLock<BTreeMap<String, MapperRecord>>>,
    registered: broadcast::Sender<MapperRecord>,
}

impl Default for Mappers {
    fn default() -> Self {
        Self {
            by_protocol: Arc::default(),
            registered: broadcast::channel(CAPACITY).0,
        }
    }
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

    /// Commits `record` to `store` (blocking), then makes it the mapper of its protocol and
    /// announces it.
    ///
    /// # Errors
    /// Store failures; nothing changes then.
    pub(super) fn register(&self, store: &MetaStore, record: MapperRecord) -> Result<()> {
        state::put_mapper(store, &record)?;
        self.write().insert(record.protocol.clone(), record.clone());
        // No reconciler listening (not started yet, or stopping) is fine: it reads them all.
        let _ = self.registered.send(record);
        Ok(())
    }

    /// The mapper serving `protocol`.
    pub fn get(&self, protocol: &str) -> Option<MapperRecord> {
        self.read().get(protocol).cloned()
    }

    /// Every registered mapper.
    pub fn all(&self) -> Vec<MapperRecord> {
        self.read().values().cloned().collect()
    }

    /// Registrations from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<MapperRecord> {
        self.registered.subscribe()
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
