//! What a node should hold, and whether a Device may go to it. Pure functions, no I/O.
//!
//! A node holds the Devices bound to it (`spec.nodeName`) and the DeviceModels they
//! reference (`spec.deviceModelRef.name`, in the Device's namespace), as it holds its pods
//! and the configmaps they reference. A Device that fails the checks of
//! [`verge_device_api::check_device`] against its model (missing model, a property not in
//! the model or without visitors, nested `configData`, ...) is not part of what its node
//! should hold: it is not sent, and a node that held an earlier version gets a `delete`, so
//! the mapper stops serving it; a Warning event names the problem (`crate::problems`).
//! Every other Device is unaffected. The downstream task compares the desired set with what
//! the node holds and sends only the difference ([`verge_controller::diff`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::DynamicObject;
use verge_controller::diff::{self, Versions};
use verge_core::{ResourceKey, ResourceType};
use verge_device_api::{Device, DeviceModel, Invalid};
use verge_proto::Inventory;

/// The types downstream manages. Inventory entries of other types (pods, twins, ...) are
/// never deleted by the device resync.
pub const fn is_managed(kind: ResourceType) -> bool {
    matches!(kind, ResourceType::Device | ResourceType::DeviceModel)
}

/// `metadata.namespace` of a namespaced object (`default` when unset).
fn namespace(object: &DynamicObject) -> &str {
    object.metadata.namespace.as_deref().unwrap_or("default")
}

/// `metadata.name` (empty when unset).
fn name(object: &DynamicObject) -> &str {
    object.metadata.name.as_deref().unwrap_or_default()
}

/// The key of a Device (`<ns>/device/<name>`).
pub fn device_key(device: &DynamicObject) -> ResourceKey {
    ResourceKey::new(namespace(device), ResourceType::Device, name(device))
}

/// The key of a DeviceModel object (`<ns>/devicemodel/<name>`).
pub fn model_key_of(model: &DynamicObject) -> ResourceKey {
    ResourceKey::new(namespace(model), ResourceType::DeviceModel, name(model))
}

/// The key of the model a Device references, if it names one.
pub fn model_key(device: &DynamicObject) -> Option<ResourceKey> {
    let model = model_name(device)?;
    Some(ResourceKey::new(
        namespace(device),
        ResourceType::DeviceModel,
        model,
    ))
}

/// A Device's `spec.nodeName`, if set and not empty.
pub fn node_name(device: &DynamicObject) -> Option<&str> {
    device.data["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
}

/// A Device's `spec.deviceModelRef.name`, if set and not empty.
pub fn model_name(device: &DynamicObject) -> Option<&str> {
    device.data["spec"]["deviceModelRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
}

/// Why a Device is not sent to its node.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The Device fails the checks against its model (or its model is missing).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The Device or its model does not read as KubeEdge's v1beta1 type (a field of the
    /// wrong type that the CRD schema let through).
    #[error("{what} does not read as devices.kubeedge.io/v1beta1")]
    Unreadable {
        /// `"the Device"` or `"its DeviceModel"`.
        what: &'static str,
        /// The JSON error, naming the field.
        #[source]
        source: serde_json::Error,
    },
}

impl Problem {
    /// The Kubernetes event reason: `DeviceModelNotFound` for a missing model,
    /// `InvalidDevice` otherwise.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid(invalid) => invalid.reason(),
            Self::Unreadable { .. } => "InvalidDevice",
        }
    }

    /// The message of the event: the problem with its causes.
    pub fn note(&self) -> String {
        verge_controller::error::reason(self)
    }
}

/// Checks `device` against `model` (`None`: the model does not exist).
///
/// # Errors
/// The [`Problem`] that keeps the Device from its node.
pub fn validate(device: &DynamicObject, model: Option<&DynamicObject>) -> Result<(), Problem> {
    let typed: Device = parse(device, "the Device")?;
    let model: Option<DeviceModel> = model.map(|m| parse(m, "its DeviceModel")).transpose()?;
    verge_device_api::check_device(&typed, model.as_ref())?;
    Ok(())
}

fn parse<T: serde::de::DeserializeOwned>(
    object: &DynamicObject,
    what: &'static str,
) -> Result<T, Problem> {
    let value =
        serde_json::to_value(object).map_err(|source| Problem::Unreadable { what, source })?;
    serde_json::from_value(value).map_err(|source| Problem::Unreadable { what, source })
}

/// What a node should hold: each valid Device bound to it and the model it references.
#[derive(Debug, Default)]
pub struct Desired {
    /// The objects to hold, by key.
    pub objects: BTreeMap<ResourceKey, Arc<DynamicObject>>,
    /// The Devices bound to the node that are left out, with the reason.
    pub refused: Vec<(ResourceKey, Problem)>,
}

/// The desired objects of a node from the `devices` bound to it; `model` looks a model up by
/// key.
pub fn desired(
    devices: impl IntoIterator<Item = Arc<DynamicObject>>,
    model: impl Fn(&ResourceKey) -> Option<Arc<DynamicObject>>,
) -> Desired {
    let mut out = Desired::default();
    for device in devices {
        let key = device_key(&device);
        let model_key = model_key(&device);
        let found = model_key.as_ref().and_then(&model);
        match validate(&device, found.as_deref()) {
            Ok(()) => {
                if let (Some(model_key), Some(found)) = (model_key, found) {
                    out.objects.insert(model_key, found);
                }
                out.objects.insert(key, device);
            }
            Err(problem) => out.refused.push((key, problem)),
        }
    }
    out
}

/// The Devices and DeviceModels of `inventory`, by key (entries that do not form a valid
/// resource path, and cluster-scoped ones, are left out).
pub fn held_from_inventory(inventory: &Inventory) -> Versions {
    diff::held_from_inventory(inventory, |key| {
        is_managed(key.kind) && key.k8s_namespace().is_some()
    })
}

#[cfg(test)]
mod tests;
