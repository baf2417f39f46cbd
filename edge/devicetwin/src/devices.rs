//! [`DeviceCache`]: the Devices and DeviceModels this node holds, parsed once from the
//! metamanager's store and kept current from its [`StoreEvent`]s. The twin logic validates
//! reports against it; the reconciler derives mapper calls from it.
//!
//! A stored object that does not parse is left out (logged): it affects only itself.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde::Deserialize;
use tracing::warn;
use verge_core::{ResourceKey, ResourceType};
use verge_device_api::{Device, DeviceModel};
use verge_runtime::ErrorChain;

use super::error::Error;
use crate::error::Result;
use verge_edge_store::{MetaStore, StoredObject};
use verge_metamanager::{Applied, StoreEvent};

/// A namespaced name of a Device or DeviceModel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl DeviceId {
    /// `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `namespace/name`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let (namespace, name) = text.split_once('/')?;
        (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
            .then(|| Self::new(namespace, name))
    }

    pub(super) fn of(key: &ResourceKey) -> Self {
        Self::new(key.namespace.clone(), key.name.clone())
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How the mapper reports the device state (`spec.stateReport`, formerly `status`): DMI
/// `Device.status.{reportToCloud, reportCycle}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateReport {
    /// Whether the mapper reports the device state.
    #[serde(default)]
    pub report_to_cloud: bool,
    /// How often, in milliseconds (0: the mapper's default).
    #[serde(default)]
    pub report_cycle: i64,
}

/// A Device as stored, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDevice {
    /// The Device (namespace and name set from its key).
    pub device: Device,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `spec.stateReport`, or the older `status.{reportToCloud, reportCycle}`.
    pub state_report: StateReport,
}

impl StoredDevice {
    /// Parses a stored Device's JSON; the key's namespace and name win over the content's.
    ///
    /// # Errors
    /// [`Error::StoredObject`] when `object` is not a Device.
    pub fn parse(id: &DeviceId, object: &StoredObject) -> Result<Self, Error> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            #[serde(default)]
            state_report: Option<StateReport>,
        }
        #[derive(Deserialize, Default)]
        struct Extra {
            #[serde(default)]
            spec: Spec,
            #[serde(default)]
            status: Option<StateReport>,
        }
        let bad = |source| Error::StoredObject {
            what: format!("device {id}"),
            source,
        };
        let mut device: Device = serde_json::from_slice(&object.content).map_err(bad)?;
        let extra: Extra = serde_json::from_slice(&object.content).map_err(bad)?;
        device.metadata.namespace = Some(id.namespace.clone());
        device.metadata.name = Some(id.name.clone());
        Ok(Self {
            device,
            uid: object.uid.clone(),
            resource_version: object.resource_version.clone(),
            state_report: extra.spec.state_report.or(extra.status).unwrap_or_default(),
        })
    }

    /// The Device's id.
    pub fn id(&self) -> DeviceId {
        DeviceId::new(self.device.namespace(), self.device.name())
    }

    /// The model's id (same namespace), if the Device names one.
    pub fn model_id(&self) -> Option<DeviceId> {
        let name = self.device.model_name()?;
        Some(DeviceId::new(self.device.namespace(), name))
    }

    /// `spec.protocol.protocolName`.
    pub fn protocol(&self) -> &str {
        &self.device.spec.protocol.protocol_name
    }
}

/// A DeviceModel as stored, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredModel {
    /// The model (namespace and name set from its key).
    pub model: DeviceModel,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
}

impl StoredModel {
    /// Parses a stored DeviceModel's JSON; the key's namespace and name win.
    ///
    /// # Errors
    /// [`Error::StoredObject`] when `object` is not a DeviceModel.
    pub fn parse(id: &DeviceId, object: &StoredObject) -> Result<Self, Error> {
        let bad = |source| Error::StoredObject {
            what: format!("device model {id}"),
            source,
        };
        let mut model: DeviceModel = serde_json::from_slice(&object.content).map_err(bad)?;
        model.metadata.namespace = Some(id.namespace.clone());
        model.metadata.name = Some(id.name.clone());
        Ok(Self {
            model,
            resource_version: object.resource_version.clone(),
        })
    }
}

/// The parsed Devices and DeviceModels at one moment.
#[derive(Debug, Clone, Default)]
pub struct Devices {
    /// Devices by id.
    pub devices: BTreeMap<DeviceId, Arc<StoredDevice>>,
    /// Models by id.
    pub models: BTreeMap<DeviceId, Arc<StoredModel>>,
}

/// What a store event changed in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A Device was stored or removed (or no longer parses).
    Device(DeviceId),
    /// A DeviceModel was stored or removed.
    Model(DeviceId),
}

/// The shared cache; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct DeviceCache(Arc<RwLock<Devices>>);

impl DeviceCache {
    /// The Device `id`, if held and valid JSON.
    pub fn device(&self, id: &DeviceId) -> Option<Arc<StoredDevice>> {
        self.read(|d| d.devices.get(id).cloned())
    }

    /// The DeviceModel `id`, if held.
    pub fn model(&self, id: &DeviceId) -> Option<Arc<StoredModel>> {
        self.read(|d| d.models.get(id).cloned())
    }

    /// A copy of the whole cache (the objects are shared, not copied).
    pub fn snapshot(&self) -> Devices {
        self.read(Clone::clone)
    }

    fn read<T>(&self, f: impl FnOnce(&Devices) -> T) -> T {
        f(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn write<T>(&self, f: impl FnOnce(&mut Devices) -> T) -> T {
        f(&mut self.0.write().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the cache with every Device and DeviceModel in `store` (blocking).
    ///
    /// # Errors
    /// Store failures.
    pub(super) fn relist(&self, store: &MetaStore) -> Result<()> {
        let mut fresh = Devices::default();
        for (key, object) in store.list(ResourceType::Device)? {
            let id = DeviceId::of(&key);
            if let Some(device) = parse_device(&id, &object) {
                fresh.devices.insert(id, Arc::new(device));
            }
        }
        for (key, object) in store.list(ResourceType::DeviceModel)? {
            let id = DeviceId::of(&key);
            if let Some(model) = parse_model(&id, &object) {
                fresh.models.insert(id, Arc::new(model));
            }
        }
        self.write(|d| *d = fresh);
        Ok(())
    }

    /// Applies a store event of a Device or DeviceModel (reading the object from `store`,
    /// blocking); `None` for events of other types.
    ///
    /// # Errors
    /// Store failures.
    pub(super) fn apply(&self, store: &MetaStore, event: &StoreEvent) -> Result<Option<Change>> {
        let id = DeviceId::of(&event.key);
        let object = match event.applied {
            Applied::Stored => store.get(&event.key)?,
            _ => None,
        };
        Ok(match event.key.kind {
            ResourceType::Device => {
                let parsed = object.and_then(|o| parse_device(&id, &o));
                self.write(|d| match parsed {
                    Some(device) => d.devices.insert(id.clone(), Arc::new(device)),
                    None => d.devices.remove(&id),
                });
                Some(Change::Device(id))
            }
            ResourceType::DeviceModel => {
                let parsed = object.and_then(|o| parse_model(&id, &o));
                self.write(|d| match parsed {
                    Some(model) => d.models.insert(id.clone(), Arc::new(model)),
                    None => d.models.remove(&id),
                });
                Some(Change::Model(id))
            }
            _ => None,
        })
    }

    /// Inserts a Device (tests and embedding).
    pub fn insert_device(&self, device: StoredDevice) {
        self.write(|d| d.devices.insert(device.id(), Arc::new(device)));
    }

    /// Inserts a DeviceModel (tests and embedding).
    pub fn insert_model(&self, id: DeviceId, model: StoredModel) {
        self.write(|d| d.models.insert(id, Arc::new(model)));
    }
}

fn parse_device(id: &DeviceId, object: &StoredObject) -> Option<StoredDevice> {
    StoredDevice::parse(id, object)
        .inspect_err(|e| warn!(error = %ErrorChain(e), "device left out"))
        .ok()
}

fn parse_model(id: &DeviceId, object: &StoredObject) -> Option<StoredModel> {
    StoredModel::parse(id, object)
        .inspect_err(|e| warn!(error = %ErrorChain(e), "device model left out"))
        .ok()
}

#[cfg(test)]
mod tests;
