//! The JSON payloads of KubeEdge's device topics, field for field (KubeEdge
//! `devicetwin/dttype`): snake_case names, values always strings, timestamps in milliseconds
//! since the Unix epoch. Unknown input fields are ignored (KubeEdge's version fields among
//! them: Verge keeps versions to itself and never publishes them); a known field of the wrong
//! type fails the whole message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One twin (property) of a device: the value the cloud wants (`expected`), the value the
/// device reports (`actual`), and its type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsgTwin {
    /// The desired value (KubeEdge `expected`; the Device's `spec.properties[].desired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<TwinValue>,
    /// The reported value (KubeEdge `actual`; the DeviceStatus's `reported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<TwinValue>,
    /// Whether the twin may be deleted by an update naming it `null` (KubeEdge default for a
    /// twin added from the edge: `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// The twin's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TypeMetadata>,
}

/// A twin value and when edgecore stored it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinValue {
    /// The value, always a string (`"23"`, `"true"`, `"on"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// When the value was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ValueMetadata>,
}

impl TwinValue {
    /// A value without metadata.
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            value: Some(value.into()),
            metadata: None,
        }
    }
}

/// The metadata of a [`TwinValue`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueMetadata {
    /// Milliseconds since the Unix epoch at which edgecore stored the value (client-supplied
    /// timestamps are ignored by the twin logic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
}

/// The metadata of a [`MsgTwin`]: its type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeMetadata {
    /// `string` (also when absent or empty), `int`, `integer`, `float`, `boolean`, or
    /// `deleted` for a twin removed by an update.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// The twins of one device by property name.
pub type Twins = BTreeMap<String, MsgTwin>;

/// `.../twin/update` in: `{"event_id","timestamp","twin":{<property>: MsgTwin | null}}`.
/// `null` deletes an optional twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinUpdateMessage {
    /// The client's event id, echoed in the answers.
    #[serde(default)]
    pub event_id: String,
    /// The client's timestamp (ignored).
    #[serde(default)]
    pub timestamp: i64,
    /// The twins to change; required.
    #[serde(default)]
    pub twin: Option<BTreeMap<String, Option<MsgTwin>>>,
}

/// An input with only the base fields (`.../twin/get`, `.../membership/get`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseMessage {
    /// The client's event id, echoed in the answer.
    #[serde(default)]
    pub event_id: String,
    /// The client's timestamp (ignored).
    #[serde(default)]
    pub timestamp: i64,
}

/// `.../state/update` in: `{"event_id","timestamp","state":"online"}` (KubeEdge's
/// `attributes` are ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateUpdateMessage {
    /// The client's event id, echoed in the answer.
    #[serde(default)]
    pub event_id: String,
    /// The client's timestamp (ignored).
    #[serde(default)]
    pub timestamp: i64,
    /// The new state, see [`DeviceState`].
    #[serde(default)]
    pub state: Option<String>,
}

/// `.../twin/update/result` out (success): the changed twins as stored now, a deleted one
/// as `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinUpdateResult {
    /// The request's event id.
    pub event_id: String,
    /// When edgecore answered (ms).
    pub timestamp: i64,
    /// The changed twins.
    pub twin: BTreeMap<String, Option<MsgTwin>>,
}

/// One entry of a [`TwinDocument`]: a twin before and after a change (`null` when it did
/// not exist or was deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinDocEntry {
    /// The twin before the change.
    pub last: Option<MsgTwin>,
    /// The twin after the change.
    pub current: Option<MsgTwin>,
}

/// `.../twin/update/document` out: each changed twin before and after.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinDocument {
    /// The event id of the update that caused it.
    pub event_id: String,
    /// When edgecore published it (ms).
    pub timestamp: i64,
    /// Per changed property, before and after.
    pub twin: BTreeMap<String, TwinDocEntry>,
}

/// `.../twin/update/delta` out: every twin that has an expected value, and for those whose
/// expected value differs from the actual one (or that have none), the expected value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinDeltaMessage {
    /// A fresh event id (UUID).
    pub event_id: String,
    /// When edgecore published it (ms).
    pub timestamp: i64,
    /// The twins that have an expected value.
    pub twin: Twins,
    /// Property name to expected value, for each twin that differs.
    pub delta: BTreeMap<String, String>,
}

/// `.../twin/get/result` out (success): every twin of the device that is not deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinGetResult {
    /// The request's event id.
    pub event_id: String,
    /// When edgecore answered (ms).
    pub timestamp: i64,
    /// The twins.
    pub twin: Twins,
}

/// Any `.../result` out on failure: `{"event_id","timestamp","code","reason"}` with an HTTP
/// status code (400 bad request, 404 unknown device, 500 store failure).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResult {
    /// The request's event id (empty when the payload could not be read).
    pub event_id: String,
    /// When edgecore answered (ms).
    pub timestamp: i64,
    /// 400, 404 or 500.
    pub code: u16,
    /// What was wrong, for people.
    pub reason: String,
}

/// `.../state/update/result` out: the device and its new state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateUpdateResult {
    /// The request's event id, or a fresh one for a state devicetwin reports.
    pub event_id: String,
    /// When edgecore published it (ms).
    pub timestamp: i64,
    /// The device.
    pub device: DeviceStateInfo,
}

/// The device part of a [`StateUpdateResult`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStateInfo {
    /// The device's name (without namespace).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The state, e.g. `online`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// When the device was last online, as devicetwin keeps it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online: String,
}

/// A device of the node, as `membership/get/result` and `membership/updated` list it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDevice {
    /// `<namespace>/<name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The device's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// A description, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The device's state, if known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// When the device was last online, if known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online: String,
}

/// `membership/get/result` out: the node's devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipGetResult {
    /// The request's event id.
    pub event_id: String,
    /// When edgecore answered (ms).
    pub timestamp: i64,
    /// The devices.
    pub devices: Vec<MemberDevice>,
}

/// `membership/updated` out: devices added to or removed from the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipUpdate {
    /// A fresh event id (UUID).
    pub event_id: String,
    /// When edgecore published it (ms).
    pub timestamp: i64,
    /// Devices now on the node.
    pub added_devices: Vec<MemberDevice>,
    /// Devices no longer on the node.
    pub removed_devices: Vec<MemberDevice>,
}

/// A device state an application or mapper may set (KubeEdge's list; matched
/// case-insensitively, published lower-case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceState {
    /// `online`.
    Online,
    /// `offline`.
    Offline,
    /// `ok`.
    Ok,
    /// `unknown`.
    Unknown,
    /// `disconnected`.
    Disconnected,
}

impl DeviceState {
    /// Every state, in KubeEdge's order.
    pub const ALL: [Self; 5] = [
        Self::Online,
        Self::Offline,
        Self::Ok,
        Self::Unknown,
        Self::Disconnected,
    ];

    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Offline => "offline",
            Self::Ok => "ok",
            Self::Unknown => "unknown",
            Self::Disconnected => "disconnected",
        }
    }

    /// The state named `text` in any case, `None` for another word.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(text))
    }

    /// Whether the device counts as online (KubeEdge stamps `last_online` for `online` and
    /// `ok`).
    pub fn is_online(self) -> bool {
        matches!(self, Self::Online | Self::Ok)
    }
}

impl std::fmt::Display for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The delta of a device's twins (KubeEdge `dealDelta`), or `None` when nothing differs:
/// over every twin that is not deleted and has a non-empty expected value, the ones whose
/// actual value is missing or different. The returned `twin` map holds every twin that has
/// an expected value. Devicetwin calls it with all twins after a change.
pub fn twin_delta(twins: &Twins) -> Option<(Twins, BTreeMap<String, String>)> {
    let mut with_expected = Twins::new();
    let mut delta = BTreeMap::new();
    for (name, twin) in twins {
        if is_deleted(twin) {
            continue;
        }
        let Some(expected) = twin.expected.as_ref().and_then(|e| e.value.as_deref()) else {
            continue;
        };
        with_expected.insert(name.clone(), twin.clone());
        let actual = twin.actual.as_ref().and_then(|a| a.value.as_deref());
        if !expected.is_empty() && actual != Some(expected) {
            delta.insert(name.clone(), expected.to_owned());
        }
    }
    (!delta.is_empty()).then_some((with_expected, delta))
}

/// Whether the twin's type is `deleted`.
pub fn is_deleted(twin: &MsgTwin) -> bool {
    twin.metadata
        .as_ref()
        .and_then(|m| m.type_.as_deref())
        .is_some_and(|t| t == "deleted")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn update_message_reads_kubeedge_json() {
        let text = r#"{"event_id":"e-1","timestamp":0,"twin":{
            "setpoint":{"expected":{"value":"22"},"actual":{"value":"21","metadata":{"timestamp":5}},
                        "metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0}},
            "old":null}}"#;
        let m: TwinUpdateMessage = serde_json::from_str(text).expect("valid");
        assert_eq!(m.event_id, "e-1");
        let twin = m.twin.expect("twin");
        let sp = twin["setpoint"].as_ref().expect("not null");
        assert_eq!(sp.expected, Some(TwinValue::new("22")));
        assert_eq!(
            sp.actual
                .as_ref()
                .and_then(|a| a.metadata.as_ref()?.timestamp),
            Some(5)
        );
        assert_eq!(
            sp.metadata.as_ref().and_then(|m| m.type_.as_deref()),
            Some("int")
        );
        assert_eq!(twin["old"], None);
    }

    #[test]
    fn wrong_types_fail() {
        for text in [
            r#"{"event_id":1,"twin":{}}"#,
            r#"{"timestamp":"now","twin":{}}"#,
            r#"{"twin":{"t":{"actual":{"value":23}}}}"#,
            r#"{"twin":[]}"#,
            r#"{"twin":{"t":{"optional":"yes"}}}"#,
            "not json",
        ] {
            assert!(
                serde_json::from_str::<TwinUpdateMessage>(text).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn outputs_use_kubeedge_names_and_omit_absent_fields() {
        let twin = MsgTwin {
            expected: Some(TwinValue {
                value: Some("22".into()),
                metadata: Some(ValueMetadata { timestamp: Some(7) }),
            }),
            actual: None,
            optional: Some(true),
            metadata: Some(TypeMetadata {
                type_: Some("int".into()),
            }),
        };
        let doc = TwinDocument {
            event_id: "e".into(),
            timestamp: 9,
            twin: BTreeMap::from([(
                "sp".to_owned(),
                TwinDocEntry {
                    last: None,
                    current: Some(twin),
                },
            )]),
        };
        assert_eq!(
            serde_json::to_value(&doc).expect("json"),
            json!({"event_id":"e","timestamp":9,"twin":{"sp":{"last":null,"current":{
                "expected":{"value":"22","metadata":{"timestamp":7}},
                "optional":true,"metadata":{"type":"int"}}}}})
        );
        let err = ErrorResult {
            event_id: String::new(),
            timestamp: 1,
            code: 400,
            reason: "r".into(),
        };
        assert_eq!(
            serde_json::to_value(&err).expect("json"),
            json!({"event_id":"","timestamp":1,"code":400,"reason":"r"})
        );
        let state = StateUpdateResult {
            event_id: "s".into(),
            timestamp: 2,
            device: DeviceStateInfo {
                name: "d".into(),
                state: "online".into(),
                last_online: String::new(),
            },
        };
        assert_eq!(
            serde_json::to_value(&state).expect("json"),
            json!({"event_id":"s","timestamp":2,"device":{"name":"d","state":"online"}})
        );
        let result = TwinUpdateResult {
            event_id: "e".into(),
            timestamp: 3,
            twin: BTreeMap::from([("gone".to_owned(), None)]),
        };
        assert_eq!(
            serde_json::to_value(&result).expect("json"),
            json!({"event_id":"e","timestamp":3,"twin":{"gone":null}})
        );
    }

    #[test]
    fn states_parse_in_any_case() {
        assert_eq!(DeviceState::parse("ONLINE"), Some(DeviceState::Online));
        assert_eq!(DeviceState::parse("Ok"), Some(DeviceState::Ok));
        assert_eq!(DeviceState::parse("busy"), None);
        assert!(DeviceState::Ok.is_online() && !DeviceState::Offline.is_online());
    }

    fn twin(expected: Option<&str>, actual: Option<&str>, type_: &str) -> MsgTwin {
        MsgTwin {
            expected: expected.map(TwinValue::new),
            actual: actual.map(TwinValue::new),
            optional: None,
            metadata: Some(TypeMetadata {
                type_: Some(type_.into()),
            }),
        }
    }

    #[test]
    fn delta_lists_differing_expected_values() {
        let twins = Twins::from([
            ("same".to_owned(), twin(Some("1"), Some("1"), "int")),
            ("differs".to_owned(), twin(Some("2"), Some("1"), "int")),
            ("no-actual".to_owned(), twin(Some("on"), None, "string")),
            ("no-expected".to_owned(), twin(None, Some("1"), "int")),
            ("empty".to_owned(), twin(Some(""), Some("1"), "string")),
            ("deleted".to_owned(), twin(Some("3"), None, "deleted")),
        ]);
        let (with_expected, delta) = twin_delta(&twins).expect("a delta");
        assert_eq!(
            delta,
            BTreeMap::from([
                ("differs".to_owned(), "2".to_owned()),
                ("no-actual".to_owned(), "on".to_owned()),
            ])
        );
        let names: Vec<_> = with_expected.keys().map(String::as_str).collect();
        assert_eq!(names, ["differs", "empty", "no-actual", "same"]);
        let settled = Twins::from([("same".to_owned(), twin(Some("1"), Some("1"), "int"))]);
        assert_eq!(twin_delta(&settled), None);
    }
}
