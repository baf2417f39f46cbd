use prost::Message as _;
use serde_json::json;

use super::*;
use crate::devices::DeviceId;
use verge_edge_store::StoredObject;

fn stored(value: serde_json::Value) -> StoredObject {
    StoredObject {
        uid: "u1".into(),
        resource_version: "7".into(),
        content: serde_json::to_vec(&value).expect("json"),
    }
}

fn stored_model() -> StoredModel {
    StoredModel::parse(
        &DeviceId::new("ns", "thermo-model"),
        &stored(json!({
            "metadata": {"name": "thermo-model"},
            "spec": {
                "protocol": "virtual",
                "protocolConfigData": {"port": "/dev/ttyS0", "baud": 9600},
                "properties": [
                    {"name": "temperature", "type": "INT", "accessMode": "ReadOnly",
                     "minimum": "-20", "unit": "Celsius",
                     "visitors": {"protocolName": "virtual", "configData": {"register": 1, "scale": 0.5}}},
                    {"name": "setpoint", "type": "INT", "accessMode": "ReadWrite"}
                ]
            }
        })),
    )
    .expect("model")
}

fn stored_device(properties: serde_json::Value) -> StoredDevice {
    StoredDevice::parse(
        &DeviceId::new("ns", "thermo"),
        &stored(json!({
            "metadata": {"name": "thermo", "namespace": "ns", "uid": "u1"},
            "spec": {
                "deviceModelRef": {"name": "thermo-model"},
                "nodeName": "edge-1",
                "protocol": {"protocolName": "virtual", "configData": {"baud": 115200, "fast": true}},
                "properties": properties,
                "methods": [{"name": "Set", "description": "d", "propertyNames": ["setpoint"]}],
                "stateReport": {"reportToCloud": true, "reportCycle": 5000}
            }
        })),
    )
    .expect("device")
}

fn unpack_f32(any: &Any) -> f32 {
    assert_eq!(
        any.type_url,
        "type.googleapis.com/google.protobuf.FloatValue"
    );
    f32::decode(any.value.as_slice()).expect("float")
}

#[test]
fn model_defaults_are_merged_and_instance_values_win() {
    let d = stored_device(json!([
        {"name": "temperature", "reportToCloud": true, "collectCycle": 1000,
         "visitors": {"configData": {"scale": 2}}},
        {"name": "setpoint", "desired": {"value": "21"},
         "visitors": {"protocolName": "virtual", "configData": {"register": 7}}}
    ]));
    let merged = merged(&d, &stored_model()).expect("valid");
    let dmi = device_message(&d, &merged);
    assert_eq!(
        (dmi.name.as_str(), dmi.namespace.as_str()),
        ("thermo", "ns")
    );
    let spec = dmi.spec.expect("spec");
    assert_eq!(spec.device_model_reference, "thermo-model");
    let protocol = spec.protocol.expect("protocol");
    let data = protocol.config_data.expect("configData").data;
    assert_eq!(
        unpack_f32(&data["baud"]),
        115_200.0,
        "the device's value wins"
    );
    assert_eq!(
        String::decode(data["port"].value.as_slice()).expect("string"),
        "/dev/ttyS0",
        "the model's default is inherited"
    );
    assert_eq!(
        data["fast"].type_url,
        "type.googleapis.com/google.protobuf.BoolValue"
    );
    let temperature = &spec.properties[0];
    let visitors = temperature.visitors.clone().expect("visitors");
    assert_eq!(visitors.protocol_name, "virtual", "from the model");
    let v = visitors.config_data.expect("configData").data;
    assert_eq!(
        (unpack_f32(&v["scale"]), unpack_f32(&v["register"])),
        (2.0, 1.0)
    );
    assert_eq!(temperature.collect_cycle, 1000);
    assert!(temperature.report_to_cloud);
    assert_eq!(
        temperature.desired,
        Some(dmi::TwinProperty::default()),
        "always present: mappers dereference it"
    );
    assert_eq!(
        spec.properties[1]
            .desired
            .as_ref()
            .map(|d| d.value.as_str()),
        Some("21")
    );
    assert_eq!(spec.methods[0].property_names, ["setpoint"]);
    let status = dmi.status.expect("status");
    assert_eq!((status.report_to_cloud, status.report_cycle), (true, 5000));
}

fn device_message(d: &StoredDevice, merged: &Device) -> dmi::Device {
    device(d, merged, None).expect("converts")
}

#[test]
fn the_model_converts_field_by_field() {
    let m = model(&stored_model());
    assert_eq!(
        (m.name.as_str(), m.namespace.as_str()),
        ("thermo-model", "ns")
    );
    let p = &m.spec.expect("spec").properties[0];
    assert_eq!(
        (
            p.r#type.as_str(),
            p.access_mode.as_str(),
            p.minimum.as_str(),
            p.unit.as_str()
        ),
        ("INT", "ReadOnly", "-20", "Celsius")
    );
}

#[test]
fn bad_devices_are_refused_with_the_reason() {
    let nested = stored_device(json!([{"name": "temperature",
        "visitors": {"protocolName": "virtual", "configData": {"reg": {"a": 1}}}}]));
    let err = merged(&nested, &stored_model()).expect_err("nested");
    assert!(
        verge_runtime::ErrorChain(&err)
            .to_string()
            .contains("visitors.configData.reg is an object"),
        "{}",
        verge_runtime::ErrorChain(&err)
    );
    let unknown =
        stored_device(json!([{"name": "humidity", "visitors": {"protocolName": "virtual"}}]));
    assert!(matches!(
        merged(&unknown, &stored_model()),
        Err(Error::InvalidDevice { .. })
    ));
    // A property without visitors of its own is served by the model's.
    let inherits = stored_device(json!([{"name": "temperature"}]));
    assert!(merged(&inherits, &stored_model()).is_ok());
    let none = stored_device(json!([{"name": "setpoint"}]));
    assert!(
        merged(&none, &stored_model()).is_err(),
        "no visitors anywhere"
    );
}

#[test]
fn json_scalars_become_kubeedge_wrappers() {
    assert_eq!(any(&json!(null)), Ok(None));
    assert_eq!(any(&json!([1])), Err("an array"));
    let int = any(&json!(3)).expect("ok").expect("some");
    assert_eq!(unpack_f32(&int), 3.0, "every number is a FloatValue");
    let s = any(&json!("x")).expect("ok").expect("some");
    assert_eq!(
        s.type_url,
        "type.googleapis.com/google.protobuf.StringValue"
    );
}

#[test]
fn current_twins_travel_in_the_status() {
    use crate::twin::{self, TwinRecord};
    let d = stored_device(json!([{"name": "temperature", "reportToCloud": true}]));
    let merged = merged(&d, &stored_model()).expect("valid");
    let mut record = TwinRecord::new("u1");
    twin::apply_report(
        &mut record,
        vec![verge_device_api::Twin {
            property_name: "temperature".into(),
            reported: Some(TwinProperty::new("22")),
            observed_desired: None,
        }],
        5,
    );
    let view = twin::view(&d.device, None, &record);
    let dmi = device(&d, &merged, Some(&view)).expect("converts");
    let twins = dmi.status.expect("status").twins;
    assert_eq!(twins.len(), 1);
    assert_eq!(
        twins[0].reported.as_ref().map(|r| r.value.as_str()),
        Some("22")
    );
}
