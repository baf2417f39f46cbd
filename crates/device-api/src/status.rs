//! Twins and the edge's status report (KubeEdge `Twin`, `TwinProperty`, `DeviceStatus`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A value with metadata, e.g. `{"value": "23", "metadata": {"timestamp": "1700000000000",
/// "type": "int"}}`. Values are text whatever the property type (KubeEdge's convention).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinProperty {
    /// The value as text.
    #[serde(default)]
    pub value: String,
    /// Free-form metadata; KubeEdge mappers set `timestamp` (Unix ms) and `type`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl TwinProperty {
    /// A value without metadata.
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            metadata: BTreeMap::new(),
        }
    }
}

/// One property's twin: what the device reported and which desired value the mapper last
/// applied (`observedDesired`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Twin {
    /// The property name.
    pub property_name: String,
    /// The value read from the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<TwinProperty>,
    /// The desired value the mapper last wrote to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_desired: Option<TwinProperty>,
}

/// The body of the edge's `update <ns>/devicestatus/<name>` report: the device's whole
/// current twin state as the edge holds it (only `reportToCloud` properties), its state and
/// when it was last online. devicecontroller writes it into the DeviceStatus object of the
/// same name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Twins by property, ordered by property name.
    #[serde(default)]
    pub twins: Vec<Twin>,
    /// The device state a mapper reported (e.g. `online`, `offline`, `unknown`); empty
    /// when never reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// When the device was last reported online, RFC 3339; empty when never.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online_time: String,
}
