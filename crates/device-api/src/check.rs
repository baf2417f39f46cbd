//! [`check_device`]: what makes a Device unusable, checked by devicecontroller before it
//! sends the Device to its node (a Warning event names the problem) and again by the edge
//! before it hands the Device to a mapper.

use serde_json::Value;

use crate::{ConfigData, Device, DeviceModel};

/// Why a Device cannot be handed to a mapper. The text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// `spec.deviceModelRef.name` is empty.
    #[error("spec.deviceModelRef.name is empty")]
    NoModelRef,
    /// The referenced model does not exist in the Device's namespace.
    #[error("device model {namespace}/{name} not found")]
    ModelNotFound {
        /// The Device's namespace.
        namespace: String,
        /// The model's name.
        name: String,
    },
    /// `spec.protocol.protocolName` is empty: no mapper could serve the device.
    #[error("spec.protocol.protocolName is empty")]
    NoProtocol,
    /// A property of the Device is not a property of its model.
    #[error("property {property:?} is not a property of device model {model:?}")]
    UnknownProperty {
        /// The property name.
        property: String,
        /// The model's name.
        model: String,
    },
    /// A property has no visitor configuration: the mapper would not know how to read it.
    #[error("property {property:?} has no visitors (spec.properties[].visitors)")]
    NoVisitor {
        /// The property name.
        property: String,
    },
    /// A `configData` value is an object or an array; mappers receive scalars only.
    #[error("{field}.{key} is {what}; configData values must be strings, numbers or booleans")]
    NestedConfig {
        /// Which configData, e.g. `spec.protocol.configData`.
        field: String,
        /// The key.
        key: String,
        /// `an object` or `an array`.
        what: &'static str,
    },
    /// Two properties have the same name.
    #[error("property {property:?} is listed twice")]
    DuplicateProperty {
        /// The property name.
        property: String,
    },
}

impl Invalid {
    /// The Kubernetes event reason for this problem: `DeviceModelNotFound` for a missing
    /// model, `InvalidDevice` otherwise.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ModelNotFound { .. } | Self::NoModelRef => "DeviceModelNotFound",
            _ => "InvalidDevice",
        }
    }
}

/// Checks `device`, with `model`'s defaults merged in ([`Device::with_model_defaults`]),
/// against its `model` (`None`: not found). Returns the first problem.
///
/// # Errors
/// The [`Invalid`] problem: no or missing model, no protocol, a property not in the model,
/// listed twice or without visitors, nested `configData`.
pub fn check_device(device: &Device, model: Option<&DeviceModel>) -> Result<(), Invalid> {
    let model_name = device.model_name().ok_or(Invalid::NoModelRef)?;
    let model = model.ok_or_else(|| Invalid::ModelNotFound {
        namespace: device.namespace().to_owned(),
        name: model_name.to_owned(),
    })?;
    let merged = device.with_model_defaults(model);
    let device = &merged;
    if device.spec.protocol.protocol_name.is_empty() {
        return Err(Invalid::NoProtocol);
    }
    check_config(
        "spec.protocol.configData",
        device.spec.protocol.config_data.as_ref(),
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for property in &device.spec.properties {
        if !seen.insert(property.name.as_str()) {
            return Err(Invalid::DuplicateProperty {
                property: property.name.clone(),
            });
        }
        if model.property(&property.name).is_none() {
            return Err(Invalid::UnknownProperty {
                property: property.name.clone(),
                model: model_name.to_owned(),
            });
        }
        let Some(visitors) = &property.visitors else {
            return Err(Invalid::NoVisitor {
                property: property.name.clone(),
            });
        };
        let field = format!("spec.properties[{}].visitors.configData", property.name);
        check_config(&field, visitors.config_data.as_ref())?;
    }
    Ok(())
}

fn check_config(field: &str, data: Option<&ConfigData>) -> Result<(), Invalid> {
    for (key, value) in data.into_iter().flatten() {
        let what = match value {
            Value::Object(_) => "an object",
            Value::Array(_) => "an array",
            _ => continue,
        };
        return Err(Invalid::NestedConfig {
            field: field.to_owned(),
            key: key.clone(),
            what,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn model() -> DeviceModel {
        serde_json::from_value(json!({
            "metadata": {"name": "thermo", "namespace": "default"},
            "spec": {"protocol": "virtual", "properties": [
                {"name": "temperature", "type": "INT", "accessMode": "ReadOnly"},
                {"name": "setpoint", "type": "INT", "accessMode": "ReadWrite"}
            ]}
        }))
        .expect("model")
    }

    fn device(properties: Value) -> Device {
        serde_json::from_value(json!({
            "apiVersion": "devices.kubeedge.io/v1beta1",
            "kind": "Device",
            "metadata": {"name": "t1", "namespace": "default"},
            "spec": {
                "deviceModelRef": {"name": "thermo"},
                "nodeName": "edge-1",
                "protocol": {"protocolName": "virtual", "configData": {"port": 1, "slow": true}},
                "properties": properties
            }
        }))
        .expect("device")
    }

    #[test]
    fn a_kubeedge_device_passes() {
        let d = device(json!([{
            "name": "temperature", "reportCycle": 1000, "collectCycle": 1000,
            "reportToCloud": true,
            "visitors": {"protocolName": "virtual", "configData": {"dataType": "int", "min": 0}}
        }]));
        assert_eq!(check_device(&d, Some(&model())), Ok(()));
        assert_eq!(d.spec.node_name, "edge-1");
        assert_eq!(
            d.property("temperature").map(|p| p.report_cycle),
            Some(1000)
        );
    }

    #[test]
    fn problems_are_named() {
        let m = model();
        let no_visitor = device(json!([{"name": "temperature"}]));
        assert!(matches!(
            check_device(&no_visitor, Some(&m)),
            Err(Invalid::NoVisitor { .. })
        ));
        let unknown =
            device(json!([{"name": "humidity", "visitors": {"protocolName": "virtual"}}]));
        assert!(matches!(
            check_device(&unknown, Some(&m)),
            Err(Invalid::UnknownProperty { .. })
        ));
        let nested = device(json!([{"name": "temperature",
            "visitors": {"protocolName": "virtual", "configData": {"reg": {"a": 1}}}}]));
        let err = check_device(&nested, Some(&m)).expect_err("nested");
        assert!(
            err.to_string()
                .contains("visitors.configData.reg is an object"),
            "{err}"
        );
        let missing = check_device(&device(json!([])), None).expect_err("missing model");
        assert_eq!(missing.reason(), "DeviceModelNotFound");
        assert_eq!(missing.to_string(), "device model default/thermo not found");
    }
}
