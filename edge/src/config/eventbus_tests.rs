//! The `eventBus:` section ([`verge_eventbus::EventBusConfig`]) in edgecore's file.

use std::path::PathBuf;
use std::time::Duration;

use verge_eventbus::MqttQos;

use crate::Config;

#[test]
fn defaults_are_documented_values() {
    let c = Config::from_yaml("", "t").expect("defaults").event_bus;
    assert!(!c.enable);
    assert_eq!(c.mqtt_server, "tcp://127.0.0.1:1883");
    assert_eq!(c.qos, MqttQos::AtLeastOnce);
    assert_eq!(c.client_id_for("edge-1"), "edgecore-edge-1");
    assert_eq!(c.keepalive, Duration::from_secs(30));
}

#[test]
fn section_parses_camel_case_and_round_trips() {
    let yaml = "eventBus:\n  enable: true\n  mqttServer: mqtt://broker:1884\n  qos: 0\n\
                \x20 clientId: app\n  username: u\n  passwordFile: /p\n  keepalive: 10s\n";
    let c = Config::from_yaml(yaml, "e").expect("valid");
    assert!(c.event_bus.enable);
    assert_eq!(c.event_bus.qos, MqttQos::AtMostOnce);
    assert_eq!(c.event_bus.client_id_for("n"), "app");
    assert_eq!(c.event_bus.password_file, Some(PathBuf::from("/p")));
    let text = c.to_yaml().expect("yaml");
    assert_eq!(Config::from_yaml(&text, "t").expect("parse"), c, "{text}");
}

#[test]
fn bad_values_name_the_field() {
    for (yaml, field) in [
        ("eventBus: {qos: 2}\n", "qos"),
        ("eventBus: {mqttMode: 2}\n", "mqttMode"),
        (
            "eventBus: {mqttServer: 'ssl://b:8883'}\n",
            "eventBus.mqttServer",
        ),
        ("eventBus: {mqttServer: 'tcp://'}\n", "eventBus.mqttServer"),
        ("eventBus: {keepalive: 500ms}\n", "eventBus.keepalive"),
        ("eventBus: {passwordFile: /p}\n", "eventBus.passwordFile"),
        ("eventBus: {publishQueue: 0}\n", "eventBus.publishQueue"),
        (
            "eventBus: {reconnectMaxBackoff: 1ms}\n",
            "eventBus.reconnectMaxBackoff",
        ),
    ] {
        let err = Config::from_yaml(yaml, "e").expect_err(yaml);
        assert!(err.to_string().contains(field), "{yaml}: {err}");
    }
}
