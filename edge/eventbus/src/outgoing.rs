//! Building the messages edgecore publishes: topic plus JSON payload, stamped with the
//! current time (ms) and, where KubeEdge makes one, a fresh event id.

use std::collections::BTreeMap;

use serde::Serialize;

use super::error::{Error, Result};
use super::payload::{
    DeviceStateInfo, ErrorResult, MemberDevice, MembershipGetResult, MembershipUpdate,
    StateUpdateResult, TwinDeltaMessage, TwinDocument, TwinGetResult, TwinUpdateResult,
};
use super::topic::{Answer, membership_updated_topic};
use super::{
    DeviceRef, DeviceState, RequestError, TwinDelta, TwinDocEntry, TwinUpdateOutcome, Twins,
};

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    /// The topic.
    pub topic: String,
    /// The JSON payload.
    pub payload: Vec<u8>,
}

impl Outgoing {
    fn json(topic: String, what: &'static str, body: &impl Serialize) -> Result<Self> {
        let payload = serde_json::to_vec(body).map_err(|source| Error::Encode { what, source })?;
        Ok(Self { topic, payload })
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A fresh event id (UUID v4), as KubeEdge makes for deltas and state results.
pub(crate) fn new_event_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The answers to a twin update (KubeEdge order): the result, then the document if anything
/// changed, then the delta if something differs.
pub(crate) fn twin_update(
    device: &DeviceRef,
    event_id: &str,
    outcome: &TwinUpdateOutcome,
) -> Result<Vec<Outgoing>> {
    let timestamp = now_ms();
    let result = TwinUpdateResult {
        event_id: event_id.to_owned(),
        timestamp,
        twin: outcome.changed.clone(),
    };
    let mut out = vec![Outgoing::json(
        Answer::TwinUpdateResult.topic(device),
        "twin update result",
        &result,
    )?];
    if !outcome.document.is_empty() {
        out.push(document_at(device, event_id, timestamp, &outcome.document)?);
    }
    if let Some(delta) = &outcome.delta {
        out.push(delta_message(device, delta)?);
    }
    Ok(out)
}

/// `.../twin/update/document` for `event_id`.
pub(crate) fn document(
    device: &DeviceRef,
    event_id: &str,
    entries: &BTreeMap<String, TwinDocEntry>,
) -> Result<Outgoing> {
    document_at(device, event_id, now_ms(), entries)
}

fn document_at(
    device: &DeviceRef,
    event_id: &str,
    timestamp: i64,
    entries: &BTreeMap<String, TwinDocEntry>,
) -> Result<Outgoing> {
    let body = TwinDocument {
        event_id: event_id.to_owned(),
        timestamp,
        twin: entries.clone(),
    };
    Outgoing::json(
        Answer::TwinUpdateDocument.topic(device),
        "twin document",
        &body,
    )
}

/// `.../twin/update/delta` with a fresh event id.
pub(crate) fn delta_message(device: &DeviceRef, delta: &TwinDelta) -> Result<Outgoing> {
    let body = TwinDeltaMessage {
        event_id: new_event_id(),
        timestamp: now_ms(),
        twin: delta.twins.clone(),
        delta: delta.delta.clone(),
    };
    Outgoing::json(Answer::TwinUpdateDelta.topic(device), "twin delta", &body)
}

/// `.../twin/get/result`.
pub(crate) fn get_result(device: &DeviceRef, event_id: &str, twins: Twins) -> Result<Outgoing> {
    let body = TwinGetResult {
        event_id: event_id.to_owned(),
        timestamp: now_ms(),
        twin: twins,
    };
    Outgoing::json(
        Answer::TwinGetResult.topic(device),
        "twin get result",
        &body,
    )
}

/// `.../state/update/result`.
pub(crate) fn state_result(
    device: &DeviceRef,
    event_id: &str,
    state: DeviceState,
    last_online: Option<&str>,
) -> Result<Outgoing> {
    let body = StateUpdateResult {
        event_id: event_id.to_owned(),
        timestamp: now_ms(),
        device: DeviceStateInfo {
            name: device.name.clone(),
            state: state.as_str().to_owned(),
            last_online: last_online.unwrap_or_default().to_owned(),
        },
    };
    Outgoing::json(
        Answer::StateUpdateResult.topic(device),
        "state update result",
        &body,
    )
}

/// `membership/get/result` on `topic`.
pub(crate) fn membership_result(
    topic: String,
    event_id: &str,
    devices: Vec<MemberDevice>,
) -> Result<Outgoing> {
    let body = MembershipGetResult {
        event_id: event_id.to_owned(),
        timestamp: now_ms(),
        devices,
    };
    Outgoing::json(topic, "membership result", &body)
}

/// `membership/updated` for `node_name`, with a fresh event id.
pub(crate) fn membership_updated(
    node_name: &str,
    added: &[MemberDevice],
    removed: &[MemberDevice],
) -> Result<Outgoing> {
    let body = MembershipUpdate {
        event_id: new_event_id(),
        timestamp: now_ms(),
        added_devices: added.to_vec(),
        removed_devices: removed.to_vec(),
    };
    Outgoing::json(
        membership_updated_topic(node_name),
        "membership update",
        &body,
    )
}

/// An error result on `topic`: the error's code, and its text with causes as the reason.
pub(crate) fn error_result(
    topic: String,
    event_id: &str,
    error: &RequestError,
) -> Result<Outgoing> {
    let body = ErrorResult {
        event_id: event_id.to_owned(),
        timestamp: now_ms(),
        code: error.code(),
        reason: verge_runtime::ErrorChain(error).to_string(),
    };
    Outgoing::json(topic, "error result", &body)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::{MsgTwin, TwinError, TwinValue};

    fn body(o: &Outgoing) -> Value {
        serde_json::from_slice(&o.payload).expect("json")
    }

    #[test]
    fn update_answers_come_in_kubeedge_order() {
        let d = DeviceRef::new("default", "thermo");
        let twin = MsgTwin {
            expected: Some(TwinValue::new("22")),
            actual: Some(TwinValue::new("21")),
            ..MsgTwin::default()
        };
        let outcome = TwinUpdateOutcome {
            changed: [("sp".to_owned(), Some(twin.clone()))].into(),
            document: [(
                "sp".to_owned(),
                TwinDocEntry {
                    last: None,
                    current: Some(twin.clone()),
                },
            )]
            .into(),
            delta: TwinDelta::of(&[("sp".to_owned(), twin)].into()),
        };
        let out = twin_update(&d, "e-1", &outcome).expect("encode");
        let topics: Vec<_> = out.iter().map(|o| o.topic.as_str()).collect();
        assert_eq!(
            topics,
            [
                "$hw/events/device/default/thermo/twin/update/result",
                "$hw/events/device/default/thermo/twin/update/document",
                "$hw/events/device/default/thermo/twin/update/delta",
            ]
        );
        let (result, doc, delta) = (body(&out[0]), body(&out[1]), body(&out[2]));
        assert_eq!(result["event_id"], "e-1");
        assert_eq!(result["timestamp"], doc["timestamp"]);
        assert_eq!(doc["twin"]["sp"]["last"], Value::Null);
        assert_eq!(delta["delta"], json!({"sp": "22"}));
        assert_ne!(delta["event_id"], "e-1");

        let quiet = twin_update(&d, "e-2", &TwinUpdateOutcome::default()).expect("encode");
        assert_eq!(quiet.len(), 1, "only the result when nothing changed");
        assert_eq!(body(&quiet[0])["twin"], json!({}));
    }

    #[test]
    fn error_results_carry_code_and_reason_chain() {
        let err = RequestError::Twin(TwinError::Store("disk full".into()));
        let o = error_result("t".to_owned(), "e", &err).expect("encode");
        let b = body(&o);
        assert_eq!(b["code"], 500);
        assert_eq!(b["reason"], "twin store failed: disk full");
        assert_eq!(b["event_id"], "e");
    }

    #[test]
    fn state_result_names_the_device() {
        let d = DeviceRef::new("default", "thermo");
        let o = state_result(&d, "s", DeviceState::Online, Some("2026-11-24 05:30:00"))
            .expect("encode");
        assert_eq!(
            o.topic,
            "$hw/events/device/default/thermo/state/update/result"
        );
        assert_eq!(
            body(&o)["device"],
            json!({"name":"thermo","state":"online","last_online":"2026-11-24 05:30:00"})
        );
    }
}
