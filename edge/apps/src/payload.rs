//! [`AppMessage`]: the MQTT payload between edgecore and edge apps, `verge.apps.v1.AppMessage`
//! in protobuf's JSON mapping (`proto/verge/apps/v1/apps.proto`): lowerCamelCase names (the
//! proto field names are accepted too), `bytes` as base64, `int64` as a string or a number,
//! unknown fields ignored (as protobuf's JSON parsers do by option, so a newer app's fields
//! never break an older edgecore).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One message between edgecore and an edge app (see the module docs for the JSON form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AppMessage {
    /// Down: the message's id. Up: the app's id for it; empty: edgecore makes one.
    pub id: String,
    /// The id of the message this answers; empty otherwise.
    #[serde(alias = "parent_id", skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    /// The operation (`update`, `response`, ...); empty up: `response` with a parent,
    /// else `update`.
    pub operation: String,
    /// The edge-side resource path `<namespace>/<type>/<name>`.
    pub resource: String,
    /// The payload.
    #[serde(with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<u8>,
    /// Milliseconds since the Unix epoch (UTC); 0: unknown.
    #[serde(
        alias = "timestamp_ms",
        serialize_with = "int64_string",
        deserialize_with = "int64_any"
    )]
    pub timestamp_ms: i64,
}

impl AppMessage {
    /// The JSON payload.
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings, bytes and an integer always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a payload.
    ///
    /// # Errors
    /// Not JSON, or a field of the wrong type (e.g. `content` not base64).
    pub fn from_json(payload: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(payload)
    }
}

/// protobuf's JSON form of `int64`: a decimal string.
fn int64_string<S: Serializer>(value: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&value.to_string())
}

/// An `int64` written as a JSON number or a decimal string.
fn int64_any<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Number(i64),
        Text(String),
    }
    match Int64::deserialize(d)? {
        Int64::Number(n) => Ok(n),
        Int64::Text(t) => t.parse().map_err(serde::de::Error::custom),
    }
}

/// `bytes` as standard base64 (with padding) out; standard or URL-safe, padded or not, in.
mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(&text).ok())
            .ok_or_else(|| serde::de::Error::custom("content is not base64"))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    fn encode_content(content: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(content)
    }

    #[test]
    fn json_follows_protobufs_mapping() {
        let message = AppMessage {
            id: "c-1".into(),
            parent_id: String::new(),
            operation: "update".into(),
            resource: "default/robot/arm".into(),
            content: b"{\"move\":1}".to_vec(),
            timestamp_ms: 1_700_000_000_000,
        };
        let json: serde_json::Value = serde_json::from_slice(&message.to_json()).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "id": "c-1",
                "operation": "update",
                "resource": "default/robot/arm",
                "content": encode_content(b"{\"move\":1}"),
                "timestampMs": "1700000000000",
            })
        );
        assert_eq!(
            AppMessage::from_json(&message.to_json()).expect("parse"),
            message
        );
    }

    #[test]
    fn parses_what_apps_write() {
        let parsed = AppMessage::from_json(
            br#"{"parent_id":"c-1","content":"eyJvayI6dHJ1ZX0","timestampMs":5,"future":1}"#,
        )
        .expect("parse");
        assert_eq!(parsed.parent_id, "c-1");
        assert_eq!(parsed.content, b"{\"ok\":true}");
        assert_eq!(parsed.timestamp_ms, 5);
        assert_eq!(
            AppMessage::from_json(b"{}").expect("empty"),
            AppMessage::default()
        );
        for bad in [
            &b"not json"[..],
            br#"{"content":"***"}"#,
            br#"{"timestampMs":"x"}"#,
        ] {
            assert!(AppMessage::from_json(bad).is_err());
        }
    }
}
