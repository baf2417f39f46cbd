//! Devices and models as DMI messages (KubeEdge `dtcommon.ConvertDevice` /
//! `ConvertDeviceModel`, with the model defaults of `dmicache.GetOverriddenDevice`).
//!
//! * The model's `protocolConfigData` and property `visitors` are merged into the Device:
//!   the model's keys first, the Device's own keys win.
//! * `configData` values become `google.protobuf.Any`: strings `StringValue`, booleans
//!   `BoolValue`, every JSON number `FloatValue` (what KubeEdge sends: CRD data arrives as
//!   JSON, whose numbers are floats); `null` is left out. Nested objects and arrays are an
//!   error for that Device only.
//! * Everything a mapper-framework mapper dereferences without a check is always present,
//!   even empty: `spec`, `spec.protocol` with `configData`, every property's `desired` and
//!   `visitors` with `configData`, and `status`.

use std::collections::HashMap;

use prost::Name;
use prost_types::Any;
use serde_json::Value;
use verge_device_api::{ConfigData, Device, TwinProperty, check_device};
use verge_proto::dmi::v1beta1 as dmi;

use super::push::push_method;
use crate::devices::{StoredDevice, StoredModel};
use crate::error::Error;
use crate::twin::DeviceTwins;

/// `device` with `model`'s defaults merged in (instance values win), checked
/// ([`check_device`] on the merged Device).
///
/// # Errors
/// [`Error::InvalidDevice`] naming the problem.
pub fn merged(device: &StoredDevice, model: &StoredModel) -> Result<Device, Error> {
    check_device(&device.device, Some(&model.model)).map_err(|source| Error::InvalidDevice {
        namespace: device.device.namespace().to_owned(),
        name: device.device.name().to_owned(),
        source,
    })?;
    Ok(device.device.with_model_defaults(&model.model))
}

/// The DMI `Device` of a merged, checked Device ([`merged`]), with the twins the edge
/// holds (`status.twins`) and `spec.stateReport` as `status.{reportToCloud, reportCycle}`.
///
/// # Errors
/// [`Error::InvalidDevice`] for a `configData` value that cannot be a protobuf `Any`.
pub fn device(
    stored: &StoredDevice,
    merged: &Device,
    twins: Option<&DeviceTwins>,
) -> Result<dmi::Device, Error> {
    let invalid = |field: String, key: &str, what: &'static str| Error::InvalidDevice {
        namespace: merged.namespace().to_owned(),
        name: merged.name().to_owned(),
        source: verge_device_api::Invalid::NestedConfig {
            field,
            key: key.to_owned(),
            what,
        },
    };
    let protocol = &merged.spec.protocol;
    let protocol_data = customized(protocol.config_data.as_ref())
        .map_err(|(key, what)| invalid("spec.protocol.configData".into(), &key, what))?;
    let mut properties = Vec::with_capacity(merged.spec.properties.len());
    for p in &merged.spec.properties {
        let visitors = p.visitors.clone().unwrap_or_default();
        let data = customized(visitors.config_data.as_ref()).map_err(|(key, what)| {
            invalid(
                format!("spec.properties[{}].visitors.configData", p.name),
                &key,
                what,
            )
        })?;
        properties.push(dmi::DeviceProperty {
            name: p.name.clone(),
            desired: Some(twin_property(p.desired.as_ref())),
            visitors: Some(dmi::VisitorConfig {
                protocol_name: visitors.protocol_name,
                config_data: Some(data),
            }),
            report_cycle: p.report_cycle,
            collect_cycle: p.collect_cycle,
            report_to_cloud: p.report_to_cloud,
            push_method: p.push_method.as_ref().map(push_method),
        });
    }
    let status_twins = twins
        .map(|t| {
            t.twins
                .iter()
                .filter(|(_, twin)| twin.reported.is_some() || twin.observed_desired.is_some())
                .map(|(name, twin)| dmi::Twin {
                    property_name: name.clone(),
                    observed_desired: twin
                        .observed_desired
                        .as_ref()
                        .map(|v| twin_property(Some(v))),
                    reported: twin.reported.as_ref().map(|v| twin_property(Some(v))),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(dmi::Device {
        name: merged.name().to_owned(),
        namespace: merged.namespace().to_owned(),
        spec: Some(dmi::DeviceSpec {
            device_model_reference: merged.model_name().unwrap_or_default().to_owned(),
            protocol: Some(dmi::ProtocolConfig {
                protocol_name: protocol.protocol_name.clone(),
                config_data: Some(protocol_data),
            }),
            properties,
            methods: merged.spec.methods.iter().filter_map(method).collect(),
        }),
        status: Some(dmi::DeviceStatus {
            twins: status_twins,
            report_to_cloud: stored.state_report.report_to_cloud,
            report_cycle: stored.state_report.report_cycle,
        }),
    })
}

/// The DMI `DeviceModel` of a stored model.
pub fn model(stored: &StoredModel) -> dmi::DeviceModel {
    let m = &stored.model;
    dmi::DeviceModel {
        name: m.metadata.name.clone().unwrap_or_default(),
        namespace: m.metadata.namespace.clone().unwrap_or_default(),
        spec: Some(dmi::DeviceModelSpec {
            properties: m
                .spec
                .properties
                .iter()
                .map(|p| dmi::ModelProperty {
                    name: p.name.clone(),
                    description: p.description.clone(),
                    r#type: p.kind.clone(),
                    access_mode: p.access_mode.clone(),
                    minimum: p.minimum.clone(),
                    maximum: p.maximum.clone(),
                    unit: p.unit.clone(),
                })
                .collect(),
            commands: Vec::new(),
        }),
    }
}

fn twin_property(value: Option<&TwinProperty>) -> dmi::TwinProperty {
    value.map_or_else(dmi::TwinProperty::default, |v| dmi::TwinProperty {
        value: v.value.clone(),
        metadata: v.metadata.clone().into_iter().collect(),
    })
}

/// A method (`{name, description, propertyNames}`); `None` for one without a name.
fn method(value: &Value) -> Option<dmi::DeviceMethod> {
    let name = value.get("name")?.as_str()?.to_owned();
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let property_names = value
        .get("propertyNames")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(dmi::DeviceMethod {
        name,
        description: text("description"),
        property_names,
    })
}

/// `configData` as a DMI `CustomizedValue` (see the module docs); `Err((key, what))` for a
/// nested value.
pub fn customized(
    data: Option<&ConfigData>,
) -> Result<dmi::CustomizedValue, (String, &'static str)> {
    let mut out = HashMap::new();
    for (key, value) in data.into_iter().flatten() {
        if let Some(any) = any(value).map_err(|what| (key.clone(), what))? {
            out.insert(key.clone(), any);
        }
    }
    Ok(dmi::CustomizedValue { data: out })
}

/// One JSON scalar as a protobuf wrapper in an `Any`; `Ok(None)` for `null`, `Err` naming
/// the kind of a nested value.
pub fn any(value: &Value) -> Result<Option<Any>, &'static str> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::String(s) => pack(s),
        Value::Bool(b) => pack(b),
        // Every JSON number, as KubeEdge sends it (mappers decode FloatValue).
        #[allow(clippy::cast_possible_truncation)]
        Value::Number(n) => pack(&(n.as_f64().unwrap_or_default() as f32)),
        Value::Object(_) => return Err("an object"),
        Value::Array(_) => return Err("an array"),
    }))
}

fn pack<M: Name>(value: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: value.encode_to_vec(),
    }
}

#[cfg(test)]
mod tests;
