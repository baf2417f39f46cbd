//! The broker's ACL file made from edgecore's configuration (`edgecore mqtt-acl`), so that
//! twin and app-group topics are usable only by the clients the configuration names (issue
//! 31): without ACLs any client of the broker may report twins for any device or read any
//! group's messages. The file is mosquitto's `acl_file` format (`user` and `topic` lines);
//! every client not named gets nothing.
//!
//! - edgecore (`eventBus.username`): every device and node topic and every app group's
//!   topic (it serves them all).
//! - each of `eventBus.clients[]`: `$hw/events/device/<ns>/<name>/#` of its devices, the
//!   node's membership topics `$hw/events/node/<node>/membership/#` when it has devices, and
//!   `verge/apps/<group>/#` of its groups.

use std::fmt::Write as _;

use crate::config::{EventBusConfig, MqttClient};
use crate::topic::{DEVICE_PREFIX, NODE_PREFIX};

/// The topic prefix of third-party app groups (`verge/apps/<group>/...`).
const APPS_PREFIX: &str = "verge/apps/";

/// Checks one `eventBus.clients[]` entry: a user name, devices `<namespace>/<name>` and
/// groups, none holding MQTT wildcards, whitespace or extra levels (each would widen or break
/// the ACL line it becomes).
///
/// # Errors
/// What is wrong, naming the entry.
pub fn check_client(client: &MqttClient) -> Result<(), String> {
    let plain = |s: &str| {
        !s.is_empty()
            && !s
                .chars()
                .any(|c| matches!(c, '#' | '+' | '/') || c.is_whitespace())
    };
    if !plain(&client.username) {
        return Err(format!(
            "client {:?}: the username must be non-empty, without '#', '+', '/' or spaces",
            client.username
        ));
    }
    for device in &client.devices {
        let ok = device
            .split_once('/')
            .is_some_and(|(ns, name)| plain(ns) && plain(name));
        if !ok {
            return Err(format!(
                "client {:?}: device {device:?} is not <namespace>/<name> (no wildcards)",
                client.username
            ));
        }
    }
    for group in &client.groups {
        if !plain(group) {
            return Err(format!(
                "client {:?}: group {group:?} must be one topic level (no wildcards)",
                client.username
            ));
        }
    }
    Ok(())
}

/// mosquitto's `acl_file` for `config` on node `node_name` (see the module docs).
///
/// # Errors
/// `eventBus.username` is empty (the broker could not tell edgecore from other clients), a
/// client entry is invalid ([`check_client`]) or uses edgecore's user name.
pub fn mosquitto_acl(config: &EventBusConfig, node_name: &str) -> Result<String, String> {
    if config.username.is_empty() {
        return Err("eventBus.username is empty: the broker cannot tell edgecore apart".into());
    }
    let mut out = format!(
        "# mosquitto acl_file made by `edgecore mqtt-acl` for node {node_name}: a client uses\n\
         # only the topics below its `user` line; clients not named here get none.\n\n\
         user {}\n\
         topic readwrite {DEVICE_PREFIX}#\n\
         topic readwrite {NODE_PREFIX}#\n\
         topic readwrite {APPS_PREFIX}#\n",
        config.username
    );
    for client in &config.clients {
        check_client(client)?;
        if client.username == config.username {
            return Err(format!(
                "client {:?} is edgecore's own user name",
                client.username
            ));
        }
        let _ = writeln!(out, "\nuser {}", client.username);
        for device in &client.devices {
            let _ = writeln!(out, "topic readwrite {DEVICE_PREFIX}{device}/#");
        }
        if !client.devices.is_empty() {
            let _ = writeln!(out, "topic readwrite {NODE_PREFIX}{node_name}/membership/#");
        }
        for group in &client.groups {
            let _ = writeln!(out, "topic readwrite {APPS_PREFIX}{group}/#");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(username: &str, devices: &[&str], groups: &[&str]) -> MqttClient {
        MqttClient {
            username: username.into(),
            devices: devices.iter().map(|d| (*d).into()).collect(),
            groups: groups.iter().map(|g| (*g).into()).collect(),
        }
    }

    #[test]
    fn each_client_gets_its_devices_and_groups_only() {
        let config = EventBusConfig {
            username: "edgecore".into(),
            clients: vec![
                client("modbus", &["default/pump", "line/meter"], &[]),
                client("robots", &[], &["robots"]),
            ],
            ..EventBusConfig::default()
        };
        let acl = mosquitto_acl(&config, "edge-1").expect("acl");
        assert!(
            acl.contains("user edgecore\ntopic readwrite $hw/events/device/#\n"),
            "{acl}"
        );
        assert!(
            acl.contains(
                "user modbus\ntopic readwrite $hw/events/device/default/pump/#\n\
             topic readwrite $hw/events/device/line/meter/#\n\
             topic readwrite $hw/events/node/edge-1/membership/#\n"
            ),
            "{acl}"
        );
        assert!(
            acl.contains("user robots\ntopic readwrite verge/apps/robots/#\n"),
            "{acl}"
        );
    }

    #[test]
    fn wildcards_and_anonymous_edgecore_are_refused() {
        let mut config = EventBusConfig::default();
        assert!(mosquitto_acl(&config, "n").is_err(), "no edgecore user");
        config.username = "edgecore".into();
        for bad in [
            client("m", &["default/#"], &[]),
            client("m", &["pump"], &[]),
            client("m", &[], &["a/b"]),
            client("m +", &[], &[]),
            client("edgecore", &[], &["g"]),
        ] {
            config.clients = vec![bad.clone()];
            assert!(mosquitto_acl(&config, "n").is_err(), "{bad:?}");
        }
    }
}
