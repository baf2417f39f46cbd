//! [`EventBusConfig`]: the `eventBus:` section (KubeEdge `modules.eventBus`): the MQTT broker
//! edge applications and mappers use for KubeEdge's `$hw/events/device/...` twin topics.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The MQTT quality of service of edgecore's subscriptions and publications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "u8", into = "u8")]
pub enum MqttQos {
    /// QoS 0, at most once.
    AtMostOnce,
    /// QoS 1, at least once (KubeEdge's choice for every twin topic).
    AtLeastOnce,
}

impl TryFrom<u8> for MqttQos {
    type Error = String;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            0 => Ok(Self::AtMostOnce),
            1 => Ok(Self::AtLeastOnce),
            other => Err(format!("qos must be 0 or 1, not {other}")),
        }
    }
}

impl From<MqttQos> for u8 {
    fn from(qos: MqttQos) -> Self {
        match qos {
            MqttQos::AtMostOnce => 0,
            MqttQos::AtLeastOnce => 1,
        }
    }
}

/// The eventbus's broker and client settings (YAML `eventBus:`); every field optional.
///
/// ```yaml
/// eventBus:
///   enable: true
///   mqttServer: tcp://127.0.0.1:1883
///   username: edgecore
///   passwordFile: /etc/kubeedge/mqtt-password
/// ```
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct EventBusConfig {
    /// Whether edgecore connects to the broker at all. Default `false`.
    pub enable: bool,
    /// The broker, `tcp://<host>:<port>` (also `mqtt://`; the port defaults to 1883). TLS
    /// (`ssl://`, `mqtts://`) is not supported. Default `tcp://127.0.0.1:1883`.
    pub mqtt_server: String,
    /// The MQTT client identifier. Default empty: `edgecore-<nodeName>`.
    pub client_id: String,
    /// QoS of the subscriptions and of every message edgecore publishes, `0` or `1`.
    /// Default `1`, as KubeEdge.
    pub qos: MqttQos,
    /// The user name edgecore logs in with. Default empty: no credentials are sent.
    pub username: String,
    /// A file holding the password of `username` (one line; a trailing newline is ignored),
    /// read once at start. Default none. Never logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// MQTT keep-alive: edgecore pings the broker when idle this long; zero or at least `1s`.
    /// Default `30s`.
    #[serde(with = "humantime_serde")]
    pub keepalive: Duration,
    /// Bound on connecting (TCP and `CONNACK`), whole seconds, at least `1s`. Default `5s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// First reconnect delay after the broker is unreachable or the connection drops; doubles
    /// per failed attempt (with jitter). Default `1s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_initial_backoff: Duration,
    /// Largest reconnect delay. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_backoff: Duration,
    /// Largest MQTT packet received or sent, in bytes. A larger message from an app breaks
    /// the connection (the client reconnects). Default 1 MiB (1048576).
    pub max_packet_size: usize,
    /// Messages waiting to be published (answers and devicetwin's pushes); a push finding it
    /// full is dropped with a warning. Default 1024.
    pub publish_queue: usize,
    /// Received messages waiting for the twin logic; one arriving when it is full is dropped
    /// with a warning. Default 1024.
    pub receive_queue: usize,
    /// Bytes (topics and payloads) the received messages waiting for the twin logic may hold;
    /// one arriving beyond it is dropped with a warning, so apps publishing large messages
    /// fill at most this much of edgecore (issue 31). At least `maxPacketSize`. Default
    /// 16 MiB (`16777216`).
    pub receive_queue_bytes: usize,
    /// The broker's other clients (mappers, edge apps) and the topics each may use, for
    /// `edgecore mqtt-acl`, which turns them into the broker's ACL file ([`crate::acl`]): a
    /// client reaches only its devices' twin topics and its app groups' topics. Default none.
    pub clients: Vec<MqttClient>,
}

/// A broker client other than edgecore (YAML `eventBus.clients[]`) and what it may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct MqttClient {
    /// The user name it logs in to the broker with.
    pub username: String,
    /// Its devices, `<namespace>/<name>`: their `$hw/events/device/<ns>/<name>/...` topics
    /// (twin, state, results) and the node's membership topics.
    pub devices: Vec<String>,
    /// Its third-party message groups: their `verge/apps/<group>/...` topics.
    pub groups: Vec<String>,
}

impl Default for EventBusConfig {
    fn default() -> Self {
        Self {
            enable: false,
            mqtt_server: "tcp://127.0.0.1:1883".to_owned(),
            client_id: String::new(),
            qos: MqttQos::AtLeastOnce,
            username: String::new(),
            password_file: None,
            keepalive: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            reconnect_initial_backoff: Duration::from_secs(1),
            reconnect_max_backoff: Duration::from_secs(30),
            max_packet_size: 1 << 20,
            publish_queue: 1024,
            receive_queue: 1024,
            receive_queue_bytes: 16 << 20,
            clients: Vec::new(),
        }
    }
}

impl EventBusConfig {
    /// Checks values that serde cannot (also when `enable` is false, so a typo shows early).
    ///
    /// # Errors
    /// The first bad field (its full YAML path) and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let bad = |field, reason: &str| Err((field, reason.to_owned()));
        if let Err(reason) = crate::BrokerAddress::parse(&self.mqtt_server) {
            return Err(("eventBus.mqttServer", reason.to_string()));
        }
        if !self.keepalive.is_zero() && self.keepalive < Duration::from_secs(1) {
            return bad("eventBus.keepalive", "must be zero or at least 1s");
        }
        if self.connect_timeout < Duration::from_secs(1) {
            return bad("eventBus.connectTimeout", "must be at least 1s");
        }
        if self.reconnect_initial_backoff.is_zero() {
            return bad(
                "eventBus.reconnectInitialBackoff",
                "must be greater than zero",
            );
        }
        if self.reconnect_max_backoff < self.reconnect_initial_backoff {
            return bad(
                "eventBus.reconnectMaxBackoff",
                "must be at least reconnectInitialBackoff",
            );
        }
        if self.max_packet_size < 1024 {
            return bad("eventBus.maxPacketSize", "must be at least 1024 bytes");
        }
        if self.publish_queue == 0 {
            return bad("eventBus.publishQueue", "must hold at least one message");
        }
        if self.receive_queue == 0 {
            return bad("eventBus.receiveQueue", "must hold at least one message");
        }
        if self.receive_queue_bytes < self.max_packet_size {
            return bad(
                "eventBus.receiveQueueBytes",
                "must hold at least one message of maxPacketSize",
            );
        }
        if self.username.is_empty() && self.password_file.is_some() {
            return bad("eventBus.passwordFile", "needs a username");
        }
        for client in &self.clients {
            if let Err(reason) = crate::acl::check_client(client) {
                return Err(("eventBus.clients", reason));
            }
        }
        Ok(())
    }

    /// The client identifier to use on node `node_name`: `clientId`, else
    /// `edgecore-<node_name>`.
    pub fn client_id_for(&self, node_name: &str) -> String {
        if self.client_id.is_empty() {
            format!("edgecore-{node_name}")
        } else {
            self.client_id.clone()
        }
    }
}
