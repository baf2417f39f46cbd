//! What the mapper of one protocol should hold: the valid Devices of that protocol (with
//! their model's defaults merged in) and the models they use, each with a fingerprint that
//! changes when what the mapper would receive changes (uid and resourceVersions; twins are
//! not part of it).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use verge_device_api::Device;
use verge_proto::dmi::v1beta1 as dmi;

use crate::devices::{DeviceId, Devices, StoredDevice, StoredModel};
use crate::dmi::convert;
use crate::error::Error;
use crate::handle::DeviceTwinHandle;

/// What a mapper was given: fingerprints by `namespace/name` (stored as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// Models by id.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Devices by id.
    #[serde(default)]
    pub devices: BTreeMap<String, String>,
}

/// A Device the mapper should hold.
#[derive(Debug, Clone)]
pub struct DesiredDevice {
    /// As stored.
    pub stored: Arc<StoredDevice>,
    /// With the model's defaults merged in, checked.
    pub merged: Device,
    /// Its model's id.
    pub model: DeviceId,
    /// Changes when the Device or its model changes.
    pub fingerprint: String,
}

/// What the mapper of one protocol should hold.
#[derive(Debug, Default)]
pub struct Desired {
    /// Models by id, with their fingerprint.
    pub models: BTreeMap<DeviceId, (String, Arc<StoredModel>)>,
    /// Devices by id.
    pub devices: BTreeMap<DeviceId, DesiredDevice>,
    /// Devices of the protocol that cannot be given to a mapper, with the reason and their
    /// fingerprint (to log each problem once).
    pub invalid: Vec<(DeviceId, String, Error)>,
}

impl Desired {
    /// The Devices of `protocol` in `devices` and their models.
    pub fn of(protocol: &str, devices: &Devices) -> Self {
        let mut out = Self::default();
        for (id, stored) in &devices.devices {
            if stored.protocol() != protocol {
                continue;
            }
            let model_id = stored.model_id();
            let model = model_id.as_ref().and_then(|m| devices.models.get(m));
            let fingerprint = format!(
                "{}/{}/{}",
                stored.uid,
                stored.resource_version,
                model.map_or("", |m| m.resource_version.as_str())
            );
            let checked = match (model_id, model) {
                (Some(model_id), Some(model)) => {
                    convert::merged(stored, model).map(|merged| (model_id, model, merged))
                }
                _ => Err(Error::InvalidDevice {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                    source: verge_device_api::check_device(&stored.device, None)
                        .err()
                        .unwrap_or(verge_device_api::Invalid::NoModelRef),
                }),
            };
            match checked {
                Ok((model_id, model, merged)) => {
                    out.models
                        .entry(model_id.clone())
                        .or_insert_with(|| (model.resource_version.clone(), Arc::clone(model)));
                    out.devices.insert(
                        id.clone(),
                        DesiredDevice {
                            stored: Arc::clone(stored),
                            merged,
                            model: model_id,
                            fingerprint,
                        },
                    );
                }
                Err(error) => out.invalid.push((id.clone(), fingerprint, error)),
            }
        }
        out
    }

    /// The DMI messages of every desired Device and model, with the twins the edge holds,
    /// and what they are ([`Sent`]) — the answer to `MapperRegister` with `withData`.
    /// A Device whose conversion fails is left out (logged by the caller through
    /// `invalid`).
    pub async fn messages(
        &self,
        twins: &DeviceTwinHandle,
    ) -> (Vec<dmi::Device>, Vec<dmi::DeviceModel>, Sent) {
        let mut sent = Sent::default();
        let mut devices = Vec::with_capacity(self.devices.len());
        for (id, d) in &self.devices {
            let current = twins.get(&id.namespace, &id.name).await.ok();
            if let Ok(message) = convert::device(&d.stored, &d.merged, current.as_ref()) {
                devices.push(message);
                sent.devices.insert(id.to_string(), d.fingerprint.clone());
            }
        }
        let models = self
            .models
            .iter()
            .map(|(id, (fingerprint, model))| {
                sent.models.insert(id.to_string(), fingerprint.clone());
                convert::model(model)
            })
            .collect();
        (devices, models, sent)
    }
}
