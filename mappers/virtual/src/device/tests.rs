use std::collections::HashMap;

use verge_proto::dmi::v1beta1::{
    CustomizedValue, DeviceModelSpec, DeviceSpec, DeviceStatus, ProtocolConfig, VisitorConfig,
};

use super::*;
use crate::config_data::{ConfigValue, encode};

fn model() -> DeviceModel {
    let property = |name: &str, mode: &str, min: &str, max: &str| ModelProperty {
        name: name.into(),
        r#type: "INT".into(),
        access_mode: mode.into(),
        minimum: min.into(),
        maximum: max.into(),
        ..ModelProperty::default()
    };
    DeviceModel {
        name: "thermometer-model".into(),
        namespace: "default".into(),
        spec: Some(DeviceModelSpec {
            properties: vec![
                property("temperature", "ReadOnly", "-20", "60"),
                property("setpoint", "ReadWrite", "5", "35"),
            ],
            commands: Vec::new(),
        }),
    }
}

fn property(
    name: &str,
    desired: &str,
    data: &[(&str, ConfigValue)],
    cycle_ms: i64,
) -> DeviceProperty {
    DeviceProperty {
        name: name.into(),
        desired: Some(TwinProperty {
            value: desired.into(),
            metadata: HashMap::new(),
        }),
        visitors: Some(VisitorConfig {
            protocol_name: "virtual".into(),
            config_data: Some(CustomizedValue {
                data: data
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), encode(v)))
                    .collect(),
            }),
        }),
        collect_cycle: cycle_ms,
        report_cycle: cycle_ms,
        report_to_cloud: true,
        ..DeviceProperty::default()
    }
}

fn device(setpoint: &str) -> Device {
    Device {
        name: "thermometer".into(),
        namespace: "default".into(),
        spec: Some(DeviceSpec {
            device_model_reference: "thermometer-model".into(),
            protocol: Some(ProtocolConfig {
                protocol_name: "virtual".into(),
                config_data: None,
            }),
            properties: vec![
                property(
                    "temperature",
                    "",
                    &[
                        ("dataType", ConfigValue::String("int".into())),
                        ("min", ConfigValue::Float(18.0)),
                        ("max", ConfigValue::Float(26.0)),
                    ],
                    100,
                ),
                property("setpoint", setpoint, &[], 0),
            ],
            methods: Vec::new(),
        }),
        status: Some(DeviceStatus {
            twins: Vec::new(),
            report_to_cloud: true,
            report_cycle: 5000,
        }),
    }
}

fn twin<'a>(twins: &'a [Twin], name: &str) -> Option<&'a Twin> {
    twins.iter().find(|t| t.property_name == name)
}

fn reported(twin: Option<&Twin>) -> (String, String) {
    let twin = twin.cloned().unwrap_or_default();
    (
        twin.reported.unwrap_or_default().value,
        twin.observed_desired.unwrap_or_default().value,
    )
}

#[test]
fn first_poll_reports_everything_and_applies_desired() {
    let now = Instant::now();
    let mut rng = rand::rng();
    let mut d = VirtualDevice::new(device("21"), Some(&model()), now);
    assert_eq!(d.model_name(), "thermometer-model");
    assert_eq!(d.next_deadline(), now);
    let due = d.poll(now, &mut rng);
    assert!(due.state);
    assert_eq!(due.twins.len(), 2);
    let (temp, observed) = reported(twin(&due.twins, "temperature"));
    let temp: i64 = temp.parse().unwrap_or(-1);
    assert!((18..=26).contains(&temp), "{temp}");
    assert_eq!(observed, "");
    assert_eq!(
        reported(twin(&due.twins, "setpoint")),
        ("21".into(), "21".into())
    );
    let meta = &due.twins[0]
        .reported
        .as_ref()
        .map(|r| r.metadata.clone())
        .unwrap_or_default();
    assert_eq!(meta.get("type").map(String::as_str), Some("int"));
    assert!(
        meta.get("timestamp")
            .is_some_and(|t| t.parse::<u128>().is_ok())
    );
}

#[test]
fn schedules_follow_the_cycles() {
    let now = Instant::now();
    let mut rng = rand::rng();
    let mut d = VirtualDevice::new(device("21"), Some(&model()), now);
    let _ = d.poll(now, &mut rng);
    assert_eq!(d.next_deadline(), now + Duration::from_millis(100));
    let due = d.poll(now + Duration::from_millis(100), &mut rng);
    assert_eq!(due.twins.len(), 1, "only temperature (100 ms) is due");
    assert!(!due.state);
    let due = d.poll(now + Duration::from_millis(1000), &mut rng);
    assert_eq!(due.twins.len(), 2, "temperature and setpoint (default 1 s)");
    let due = d.poll(now + Duration::from_millis(5000), &mut rng);
    assert!(due.state, "status.reportCycle 5 s");
}

#[test]
fn update_applies_a_new_desired_value_at_once() {
    let now = Instant::now();
    let mut rng = rand::rng();
    let mut d = VirtualDevice::new(device("21"), Some(&model()), now);
    let _ = d.poll(now, &mut rng);
    let later = now + Duration::from_millis(10);
    d.update(device("23"), Some(&model()), later);
    assert_eq!(d.next_deadline(), later);
    let due = d.poll(later, &mut rng);
    assert_eq!(due.twins.len(), 1);
    assert_eq!(
        reported(twin(&due.twins, "setpoint")),
        ("23".into(), "23".into())
    );
    assert_eq!(
        reported(twin(&d.twins(), "setpoint")),
        ("23".into(), "23".into())
    );
}

#[test]
fn read_only_properties_echo_desired_but_keep_simulating() {
    let now = Instant::now();
    let mut rng = rand::rng();
    let mut dev = device("21");
    if let Some(spec) = dev.spec.as_mut() {
        spec.properties[0].desired = Some(TwinProperty {
            value: "99".into(),
            metadata: HashMap::new(),
        });
    }
    let mut d = VirtualDevice::new(dev, Some(&model()), now);
    let due = d.poll(now, &mut rng);
    let (value, observed) = reported(twin(&due.twins, "temperature"));
    assert_ne!(value, "99");
    assert_eq!(observed, "99");
}

#[test]
fn without_model_desired_values_are_written_and_bounds_default() {
    let now = Instant::now();
    let mut rng = rand::rng();
    let mut d = VirtualDevice::new(device("7"), None, now);
    let due = d.poll(now, &mut rng);
    assert_eq!(
        reported(twin(&due.twins, "setpoint")),
        ("7".into(), "7".into())
    );
    assert_eq!(cycle(0), DEFAULT_CYCLE);
    assert_eq!(cycle(-5), DEFAULT_CYCLE);
    assert_eq!(cycle(250), Duration::from_millis(250));
}
