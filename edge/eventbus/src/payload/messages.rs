//! The twin messages: `twin/update` in and its result, document and delta out; `twin/get`
//! in and its result; the error result of any request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::twin::{MsgTwin, Twins};

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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::payload::{
        DeviceStateInfo, StateUpdateResult, TwinValue, TypeMetadata, ValueMetadata,
    };

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
}
