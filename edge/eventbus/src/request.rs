//! Decoding and checking request payloads before the twin logic sees them (KubeEdge
//! `dtcommon.ValidateTwinKey` / `ValidateTwinValue`).

use serde_json::Value;

use super::payload::{BaseMessage, DeviceState, StateUpdateMessage, TwinUpdateMessage};
use super::{TwinError, TwinUpdate};

/// The longest property name.
pub const MAX_PROPERTY_NAME: usize = 128;

/// The longest property value.
pub const MAX_PROPERTY_VALUE: usize = 512;

/// Why a request gets an error result instead of an answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The payload is not JSON, or a field has the wrong type (code 400).
    #[error("the payload is not a valid {what} message")]
    Decode {
        /// The message kind, e.g. `twin update`.
        what: &'static str,
        /// The JSON error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A twin update without a `twin` object (code 400).
    #[error("the twin update has no \"twin\" object")]
    MissingTwin,
    /// A property name that is empty, too long or has other characters (code 400).
    #[error(
        "invalid property name {0:?}: 1 to 128 letters, digits and the characters - _ . , : / @ #"
    )]
    PropertyName(String),
    /// A property value that is too long or has other characters (code 400).
    #[error(
        "invalid {field} value of property {property:?}: at most 512 letters, digits and the \
         characters - _ . , : / @ #"
    )]
    PropertyValue {
        /// The property.
        property: String,
        /// `expected` or `actual`.
        field: &'static str,
    },
    /// A state update without a `state` (code 400).
    #[error("the state update has no \"state\"")]
    MissingState,
    /// A state that is none of KubeEdge's (code 400).
    #[error("unknown state {0:?}: use online, offline, ok, unknown or disconnected")]
    UnknownState(String),
    /// The twin logic did not answer in time (code 500).
    #[error("the twin logic did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The twin logic refused the request (its code).
    #[error(transparent)]
    Twin(#[from] TwinError),
}

impl RequestError {
    /// The code of the error result: 400, 500 for a timeout, or the twin logic's
    /// ([`TwinError::code`]).
    pub fn code(&self) -> u16 {
        match self {
            Self::Twin(e) => e.code(),
            Self::Timeout(_) => 500,
            _ => 400,
        }
    }
}

/// The characters KubeEdge allows in property names and values.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.,:/@#".contains(c)
}

/// Checks every property name and non-empty value of `update` (the rules KubeEdge applies to
/// every twin update, from MQTT or a DMI report).
///
/// # Errors
/// [`RequestError::PropertyName`] or [`RequestError::PropertyValue`] for the first offender.
pub fn check_twin_update(update: &TwinUpdate) -> Result<(), RequestError> {
    for (property, twin) in &update.twins {
        if property.is_empty()
            || property.len() > MAX_PROPERTY_NAME
            || !property.chars().all(allowed)
        {
            return Err(RequestError::PropertyName(property.clone()));
        }
        let Some(twin) = twin else { continue };
        for (field, value) in [("expected", &twin.expected), ("actual", &twin.actual)] {
            let Some(value) = value.as_ref().and_then(|v| v.value.as_deref()) else {
                continue;
            };
            if value.len() > MAX_PROPERTY_VALUE || !value.chars().all(allowed) {
                return Err(RequestError::PropertyValue {
                    property: property.clone(),
                    field,
                });
            }
        }
    }
    Ok(())
}

/// The event id of a payload that may not decode: `""` when it is not a JSON object with a
/// string `event_id`.
pub fn event_id_of(payload: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Id {
        event_id: String,
    }
    serde_json::from_slice::<Id>(payload)
        .map(|id| id.event_id)
        .unwrap_or_default()
}

/// Decodes `payload` as `T`, refusing JSON arrays where KubeEdge has objects (serde would
/// read a struct from an array): the message itself, `twin`, each twin, and each twin's
/// `expected`, `actual` and `metadata` must be objects (or `null` where optional).
fn decode<T: serde::de::DeserializeOwned>(
    payload: &[u8],
    what: &'static str,
) -> Result<T, RequestError> {
    let fail = |source| RequestError::Decode { what, source };
    let value: Value = serde_json::from_slice(payload).map_err(fail)?;
    objects_only(&value).map_err(fail)?;
    serde_json::from_value(value).map_err(fail)
}

/// See [`decode`].
fn objects_only(message: &Value) -> Result<(), serde_json::Error> {
    fn object_or_null(value: Option<&Value>, path: &str) -> Result<(), serde_json::Error> {
        match value {
            None | Some(Value::Null | Value::Object(_)) => Ok(()),
            Some(_) => Err(serde::de::Error::custom(format!(
                "{path} must be a JSON object"
            ))),
        }
    }
    let Value::Object(message) = message else {
        return Err(serde::de::Error::custom(
            "the message must be a JSON object",
        ));
    };
    object_or_null(message.get("twin"), "twin")?;
    let Some(Value::Object(twins)) = message.get("twin") else {
        return Ok(());
    };
    for (name, twin) in twins {
        object_or_null(Some(twin), &format!("twin.{name}"))?;
        for field in ["expected", "actual", "metadata"] {
            object_or_null(twin.get(field), &format!("twin.{name}.{field}"))?;
        }
    }
    Ok(())
}

/// Decodes and checks a `twin/update` payload.
///
/// # Errors
/// [`RequestError::Decode`], [`RequestError::MissingTwin`], or as [`check_twin_update`].
pub fn twin_update(payload: &[u8]) -> Result<TwinUpdate, RequestError> {
    let message: TwinUpdateMessage = decode(payload, "twin update")?;
    let update = TwinUpdate {
        event_id: message.event_id,
        twins: message.twin.ok_or(RequestError::MissingTwin)?,
    };
    check_twin_update(&update)?;
    Ok(update)
}

/// Decodes a `twin/get` or `membership/get` payload; `what` names it in errors.
///
/// # Errors
/// [`RequestError::Decode`].
pub fn base(payload: &[u8], what: &'static str) -> Result<BaseMessage, RequestError> {
    decode(payload, what)
}

/// Decodes a `state/update` payload: its event id and state.
///
/// # Errors
/// [`RequestError::Decode`], [`RequestError::MissingState`], [`RequestError::UnknownState`].
pub fn state_update(payload: &[u8]) -> Result<(String, DeviceState), RequestError> {
    let message: StateUpdateMessage = decode(payload, "state update")?;
    let text = message.state.ok_or(RequestError::MissingState)?;
    let state = DeviceState::parse(&text).ok_or(RequestError::UnknownState(text))?;
    Ok((message.event_id, state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MsgTwin, TwinValue};

    #[test]
    fn good_update_decodes() {
        let u = twin_update(
            br#"{"event_id":"e","twin":{"temp-1":{"actual":{"value":"-23.5"}},"x":null}}"#,
        )
        .expect("valid");
        assert_eq!(u.event_id, "e");
        assert_eq!(u.twins.len(), 2);
        assert_eq!(u.twins["x"], None);
    }

    #[test]
    fn bad_updates_are_400_with_a_reason() {
        for (payload, needle) in [
            (&b"{not json"[..], "not a valid twin update"),
            (
                br#"{"twin":{"t":{"actual":{"value":23}}}}"#,
                "not a valid twin update",
            ),
            (br#"{"event_id":"e"}"#, "no \"twin\""),
            (br#"{"twin":null}"#, "no \"twin\""),
            (br#"{"twin":{"a b":{}}}"#, "invalid property name \"a b\""),
            (br#"{"twin":{"":{}}}"#, "invalid property name"),
            (
                br#"{"twin":{"t":{"expected":{"value":"a b"}}}}"#,
                "invalid expected value",
            ),
            (b"[]", "not a valid twin update"),
            (br#"{"twin":[]}"#, "not a valid twin update"),
            (br#"{"twin":{"t":[]}}"#, "not a valid twin update"),
            (
                br#"{"twin":{"t":{"actual":["1"]}}}"#,
                "not a valid twin update",
            ),
        ] {
            let err = twin_update(payload).expect_err(needle);
            assert_eq!(err.code(), 400);
            assert!(err.to_string().contains(needle), "{err}");
        }
        let long = format!(
            r#"{{"twin":{{"t":{{"actual":{{"value":"{}"}}}}}}}}"#,
            "9".repeat(513)
        );
        assert!(matches!(
            twin_update(long.as_bytes()),
            Err(RequestError::PropertyValue {
                field: "actual",
                ..
            })
        ));
    }

    #[test]
    fn empty_values_pass_the_pattern() {
        let u = TwinUpdate {
            event_id: String::new(),
            twins: [(
                "t".to_owned(),
                Some(MsgTwin {
                    expected: Some(TwinValue::new("")),
                    ..MsgTwin::default()
                }),
            )]
            .into(),
        };
        assert!(check_twin_update(&u).is_ok());
    }

    #[test]
    fn state_updates_decode_case_insensitively() {
        let (id, state) = state_update(br#"{"event_id":"s","state":"ONLINE"}"#).expect("valid");
        assert_eq!((id.as_str(), state), ("s", DeviceState::Online));
        assert!(matches!(
            state_update(br#"{"state":"busy"}"#),
            Err(RequestError::UnknownState(s)) if s == "busy"
        ));
        assert!(matches!(
            state_update(b"{}"),
            Err(RequestError::MissingState)
        ));
        assert!(matches!(
            state_update(b"[]"),
            Err(RequestError::Decode { .. })
        ));
    }

    #[test]
    fn event_id_is_recovered_when_possible() {
        assert_eq!(event_id_of(br#"{"event_id":"e","twin":5}"#), "e");
        assert_eq!(event_id_of(b"nope"), "");
    }
}
