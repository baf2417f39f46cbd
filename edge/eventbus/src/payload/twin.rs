//! One twin ([`MsgTwin`]: expected and actual value, type) and the delta of a device's twins.

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
    use super::*;

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
