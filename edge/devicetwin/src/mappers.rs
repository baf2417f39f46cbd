//! [`Mappers`]: the mappers that registered (DMI `MapperRegister`), one per protocol,
//! persisted in redb so that after an edgecore restart their devices are served again
//! without waiting for a new registration. Each registration records its owner, the process
//! that made it ([`MapperOwner`], from the socket's peer credentials): while that process
//! runs, no other process may register the protocol or report for its devices (unless the
//! protocol is in `deviceTwin.sharedProtocols`, where the newest registration wins, as in
//! KubeEdge).

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
    /// The process that registered it; `None` for a registration stored before owners were
    /// recorded (the next registration of the protocol takes it).
    #[serde(default)]
    pub owner: Option<MapperOwner>,
}

/// The process that registered a mapper: its pid and uid from the DMI socket's peer
/// credentials, and its start time so that a pid reused by another process is not taken
/// for the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MapperOwner {
    /// Process id (in edgecore's pid namespace).
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Start time of the process, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
}

impl MapperOwner {
    /// The owner record of the live process `pid` running as `uid`; `None` when the process
    /// is gone (or `/proc` cannot be read).
    pub fn of(pid: i32, uid: u32) -> Option<Self> {
        Some(Self {
            pid,
            uid,
            start_time: process_start_time(pid)?,
        })
    }

    /// Whether the owning process still runs (the same pid with the same start time).
    pub fn is_running(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time)
    }
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`; `None` if the process does not exist or
/// has exited (a zombie not yet reaped by its parent).
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses;
    // the fields after the last ')' start with field 3, the state.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
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

    /// How many protocols are registered.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no mapper is registered.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_its_own_running_owner() {
        let pid = i32::try_from(std::process::id()).expect("pid");
        let me = MapperOwner::of(pid, 0).expect("this process");
        assert!(me.is_running());
        let reused = MapperOwner {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!reused.is_running(), "another process under a reused pid");
        assert_eq!(MapperOwner::of(i32::MAX, 0), None);
    }
}
