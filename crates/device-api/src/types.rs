//! [`Device`] and [`DeviceModel`] (KubeEdge `pkg/apis/devices/v1beta1`, `device_instance_types.go`
//! and `device_model_types.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TwinProperty;

/// Protocol or visitor configuration: free-form keys whose values are JSON scalars
/// (strings, numbers, booleans). Mappers receive each value as a protobuf `Any` (DMI), so
/// nested objects and arrays are refused by [`crate::check_device`].
pub type ConfigData = BTreeMap<String, Value>;

/// A device instance (`kind: Device`, namespaced).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the device is and how to reach it.
    #[serde(default)]
    pub spec: DeviceSpec,
}

/// `Device.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSpec {
    /// The model, by name, in the Device's namespace (`{"name": ...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model_ref: Option<ModelRef>,
    /// The edge node the device is attached to; empty: on no node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The protocol a mapper speaks to the device with.
    #[serde(default)]
    pub protocol: ProtocolConfig,
    /// The device's properties (desired values, how to read them, how often).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<DeviceProperty>,
    /// Methods the device offers (kept as written; Verge does not interpret them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<Value>,
    /// How often and whether the mapper reports the device's state
    /// (`{reportCycle, reportToCloud}`, KubeEdge v1.23), kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_report: Option<Value>,
}

/// A reference to a [`DeviceModel`] by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRef {
    /// The model's name.
    #[serde(default)]
    pub name: String,
}

/// `spec.protocol`: which mapper serves the device and its connection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolConfig {
    /// The protocol name; devices go to the mapper that registered this protocol.
    #[serde(default)]
    pub protocol_name: String,
    /// Connection settings for the mapper, e.g. a serial port or an address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_data: Option<ConfigData>,
}

/// `spec.properties[].visitors`: how the mapper reads one property.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VisitorConfig {
    /// The protocol the visitor is written for (normally the device's).
    #[serde(default)]
    pub protocol_name: String,
    /// Per-property settings, e.g. a register address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_data: Option<ConfigData>,
}

/// `spec.properties[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceProperty {
    /// The property name; must be a property of the model.
    pub name: String,
    /// The desired value the mapper should write to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<TwinProperty>,
    /// How the mapper reads the property.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitors: Option<VisitorConfig>,
    /// How often the mapper reports the value, in milliseconds; 0: the mapper's default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub report_cycle: i64,
    /// How often the mapper reads the device, in milliseconds; 0: the mapper's default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub collect_cycle: i64,
    /// Whether reported values go to the cloud (the DeviceStatus); otherwise they stay on
    /// the edge (MQTT, local apps).
    #[serde(default)]
    pub report_to_cloud: bool,
    /// Where the mapper pushes values besides edgecore (HTTP, MQTT, databases), kept as
    /// written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_method: Option<Value>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A device model (`kind: DeviceModel`, namespaced).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceModel {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The properties devices of this model have.
    #[serde(default)]
    pub spec: DeviceModelSpec,
}

/// `DeviceModel.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceModelSpec {
    /// The model's properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<ModelProperty>,
    /// The protocol devices of this model speak (informational).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// Protocol settings every Device of the model inherits
    /// (`spec.protocol.configData` defaults; a Device's own keys win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_config_data: Option<ConfigData>,
}

/// `DeviceModel.spec.properties[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelProperty {
    /// The property name.
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The value type: `INT`, `FLOAT`, `DOUBLE`, `STRING`, `BOOLEAN`, `BYTES`, `STREAM`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// `ReadWrite` or `ReadOnly`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub access_mode: String,
    /// Lower bound, as text; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub minimum: String,
    /// Upper bound, as text; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub maximum: String,
    /// Unit of the value, e.g. `degree Celsius`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
    /// Default visitors of this property for every Device of the model (a Device's own
    /// protocol name and `configData` keys win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitors: Option<VisitorConfig>,
}

impl Device {
    /// The model's name, or `None` when the Device names none.
    pub fn model_name(&self) -> Option<&str> {
        self.spec
            .device_model_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
    }

    /// The namespace (`default` when unset, as the API server fills it).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// The name (empty when unset).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The property named `name`.
    pub fn property(&self, name: &str) -> Option<&DeviceProperty> {
        self.spec.properties.iter().find(|p| p.name == name)
    }
}

impl Device {
    /// This Device with `model`'s defaults merged in, as mappers receive it: the model's
    /// `protocolConfigData` under `spec.protocol.configData`, and each model property's
    /// `visitors` under the Device property of the same name (protocol name when the
    /// Device sets none, `configData` keys); the Device's own values win.
    pub fn with_model_defaults(&self, model: &DeviceModel) -> Device {
        let mut merged = self.clone();
        if let Some(defaults) = &model.spec.protocol_config_data {
            let own = merged.spec.protocol.config_data.take().unwrap_or_default();
            merged.spec.protocol.config_data = Some(overlay(defaults, own));
        }
        for property in &mut merged.spec.properties {
            let Some(defaults) = model
                .property(&property.name)
                .and_then(|p| p.visitors.as_ref())
            else {
                continue;
            };
            match &mut property.visitors {
                None => property.visitors = Some(defaults.clone()),
                Some(own) => {
                    if own.protocol_name.is_empty() {
                        own.protocol_name.clone_from(&defaults.protocol_name);
                    }
                    if let Some(base) = &defaults.config_data {
                        let data = own.config_data.take().unwrap_or_default();
                        own.config_data = Some(overlay(base, data));
                    }
                }
            }
        }
        merged
    }
}

/// `base` with `own`'s keys replacing or adding to it.
fn overlay(base: &ConfigData, own: ConfigData) -> ConfigData {
    let mut out = base.clone();
    out.extend(own);
    out
}

impl DeviceModel {
    /// The property named `name`.
    pub fn property(&self, name: &str) -> Option<&ModelProperty> {
        self.spec.properties.iter().find(|p| p.name == name)
    }
}
