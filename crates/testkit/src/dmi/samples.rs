//! Sample DMI objects as edgecore sends them (the thermometer of
//! `deploy/examples/devices/`), and `configData` values.

use prost::Message as _;
use prost_types::Any;
use verge_proto::dmi::v1beta1::{
    CustomizedValue, Device, DeviceModel, DeviceModelSpec, DeviceProperty, DeviceSpec,
    DeviceStatus, ModelProperty, ProtocolConfig, TwinProperty, VisitorConfig,
};

/// A string as edgecore sends a `configData` value: `google.protobuf.StringValue` in an Any.
pub fn any_string(value: &str) -> Any {
    Any {
        type_url: "type.googleapis.com/google.protobuf.StringValue".to_owned(),
        value: value.to_owned().encode_to_vec(),
    }
}

/// A JSON number as edgecore sends it: `google.protobuf.FloatValue` in an Any.
pub fn any_float(value: f32) -> Any {
    Any {
        type_url: "type.googleapis.com/google.protobuf.FloatValue".to_owned(),
        value: value.encode_to_vec(),
    }
}

/// The model of `deploy/examples/devices/thermometer-model.yaml` as edgecore sends it
/// (name `thermometer-model`): `temperature` (INT, ReadOnly, -20..60) and `setpoint` (INT,
/// ReadWrite, 5..35).
pub fn thermometer_model(namespace: &str) -> DeviceModel {
    let property = |name: &str, mode: &str, min: &str, max: &str| ModelProperty {
        name: name.to_owned(),
        description: String::new(),
        r#type: "INT".to_owned(),
        access_mode: mode.to_owned(),
        minimum: min.to_owned(),
        maximum: max.to_owned(),
        unit: "Celsius".to_owned(),
    };
    DeviceModel {
        name: "thermometer-model".to_owned(),
        namespace: namespace.to_owned(),
        spec: Some(DeviceModelSpec {
            properties: vec![
                property("temperature", "ReadOnly", "-20", "60"),
                property("setpoint", "ReadWrite", "5", "35"),
            ],
            commands: Vec::new(),
        }),
    }
}

/// A device like `deploy/examples/devices/thermometer-device.yaml` as edgecore sends it
/// (every message mapper-framework dereferences present, numbers as FloatValue): protocol
/// `protocol`, model `thermometer-model`, `temperature` (int walk 18..26, step 1) and
/// `setpoint` with desired value `setpoint`, both collected and reported every
/// `cycle_ms`, state every `cycle_ms`.
pub fn thermometer_device(
    namespace: &str,
    name: &str,
    protocol: &str,
    setpoint: &str,
    cycle_ms: i64,
) -> Device {
    let property = |name: &str, desired: &str, data: Vec<(&str, Any)>| DeviceProperty {
        name: name.to_owned(),
        desired: Some(TwinProperty {
            value: desired.to_owned(),
            metadata: [("type".to_owned(), "int".to_owned())].into(),
        }),
        visitors: Some(VisitorConfig {
            protocol_name: protocol.to_owned(),
            config_data: Some(CustomizedValue {
                data: data.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            }),
        }),
        report_cycle: cycle_ms,
        collect_cycle: cycle_ms,
        report_to_cloud: true,
        push_method: None,
    };
    Device {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        spec: Some(DeviceSpec {
            device_model_reference: "thermometer-model".to_owned(),
            protocol: Some(ProtocolConfig {
                protocol_name: protocol.to_owned(),
                config_data: Some(CustomizedValue {
                    data: [("deviceID".to_owned(), any_string(name))].into(),
                }),
            }),
            properties: vec![
                property(
                    "temperature",
                    "",
                    vec![
                        ("dataType", any_string("int")),
                        ("min", any_float(18.0)),
                        ("max", any_float(26.0)),
                        ("step", any_float(1.0)),
                    ],
                ),
                property("setpoint", setpoint, vec![("dataType", any_string("int"))]),
            ],
            methods: Vec::new(),
        }),
        status: Some(DeviceStatus {
            twins: Vec::new(),
            report_to_cloud: true,
            report_cycle: cycle_ms,
        }),
    }
}
