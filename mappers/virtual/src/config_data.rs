//! Reading DMI `configData` (`CustomizedValue`: a map of `google.protobuf.Any`).
//!
//! edgecore wraps every scalar of a Device's `configData` in an `Any`: strings as
//! `google.protobuf.StringValue`, booleans as `BoolValue`, JSON numbers as `FloatValue`
//! (KubeEdge's conversion; Go integers become `Int32Value`/`Int64Value`). As in KubeEdge's
//! mapper-framework, the type is the text after the last `/` of `type_url`; this module also
//! reads `DoubleValue`. Entries of any other type are skipped (logged at debug).

use std::collections::BTreeMap;

use prost::Message as _;
use prost_types::Any;
use verge_proto::dmi::v1beta1::CustomizedValue;

/// One decoded `configData` value.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// `StringValue`.
    String(String),
    /// `FloatValue` or `DoubleValue`.
    Float(f64),
    /// `Int32Value` or `Int64Value`.
    Int(i64),
    /// `BoolValue`.
    Bool(bool),
}

impl ConfigValue {
    /// The value as a number: numbers as they are, strings parsed (`"3.5"`), booleans `None`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Float(f) => Some(*f),
            #[allow(clippy::cast_precision_loss)]
            Self::Int(i) => Some(*i as f64),
            Self::String(s) => s.trim().parse().ok(),
            Self::Bool(_) => None,
        }
    }

    /// The value as text (`"21"` for the integer 21, `"true"`, the string itself).
    pub fn as_text(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Float(f) => f.to_string(),
            Self::Int(i) => i.to_string(),
            Self::Bool(b) => b.to_string(),
        }
    }
}

/// A decoded `configData`: key → value, sorted by key.
pub type ConfigData = BTreeMap<String, ConfigValue>;

/// Decodes every entry of `value` whose `Any` is a supported wrapper; others are skipped.
pub fn decode(value: Option<&CustomizedValue>) -> ConfigData {
    let Some(value) = value else {
        return ConfigData::new();
    };
    value
        .data
        .iter()
        .filter_map(|(key, any)| match decode_any(any) {
            Some(v) => Some((key.clone(), v)),
            None => {
                tracing::debug!(key, type_url = any.type_url, "configData entry skipped");
                None
            }
        })
        .collect()
}

/// Decodes one `Any` wrapping a `google.protobuf` scalar wrapper.
pub fn decode_any(any: &Any) -> Option<ConfigValue> {
    let kind = any.type_url.rsplit('/').next().unwrap_or_default();
    let bytes = any.value.as_slice();
    match kind {
        "google.protobuf.StringValue" => String::decode(bytes).ok().map(ConfigValue::String),
        "google.protobuf.FloatValue" => f32::decode(bytes)
            .ok()
            .map(|f| ConfigValue::Float(f64::from(f))),
        "google.protobuf.DoubleValue" => f64::decode(bytes).ok().map(ConfigValue::Float),
        "google.protobuf.Int32Value" => i32::decode(bytes)
            .ok()
            .map(|i| ConfigValue::Int(i64::from(i))),
        "google.protobuf.Int64Value" => i64::decode(bytes).ok().map(ConfigValue::Int),
        "google.protobuf.BoolValue" => bool::decode(bytes).ok().map(ConfigValue::Bool),
        _ => None,
    }
}

/// Encodes `value` as edgecore does (strings `StringValue`, numbers `FloatValue`, booleans
/// `BoolValue`); for tests and tools that build DMI devices.
pub fn encode(value: &ConfigValue) -> Any {
    let (kind, bytes) = match value {
        ConfigValue::String(s) => ("StringValue", s.encode_to_vec()),
        #[allow(clippy::cast_possible_truncation)]
        ConfigValue::Float(f) => ("FloatValue", (*f as f32).encode_to_vec()),
        ConfigValue::Int(i) => ("Int64Value", i.encode_to_vec()),
        ConfigValue::Bool(b) => ("BoolValue", b.encode_to_vec()),
    };
    Any {
        type_url: format!("type.googleapis.com/google.protobuf.{kind}"),
        value: bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_unknown_types() {
        let mut data = std::collections::HashMap::new();
        for (k, v) in [
            ("s", ConfigValue::String("int".into())),
            ("f", ConfigValue::Float(18.5)),
            ("i", ConfigValue::Int(-3)),
            ("b", ConfigValue::Bool(true)),
        ] {
            data.insert(k.to_owned(), encode(&v));
        }
        data.insert(
            "u".to_owned(),
            Any {
                type_url: "type.googleapis.com/google.protobuf.UInt32Value".into(),
                value: 7u32.encode_to_vec(),
            },
        );
        let decoded = decode(Some(&CustomizedValue { data }));
        assert_eq!(decoded.len(), 4);
        assert_eq!(decoded["s"], ConfigValue::String("int".into()));
        assert_eq!(decoded["f"].as_f64(), Some(18.5));
        assert_eq!(decoded["i"].as_f64(), Some(-3.0));
        assert_eq!(decoded["b"].as_text(), "true");
        assert_eq!(ConfigValue::String(" 7 ".into()).as_f64(), Some(7.0));
        assert!(decode(None).is_empty());
    }

    #[test]
    fn double_value_is_read() {
        let any = Any {
            type_url: "google.protobuf.DoubleValue".into(),
            value: 2.25f64.encode_to_vec(),
        };
        assert_eq!(decode_any(&any), Some(ConfigValue::Float(2.25)));
    }
}
