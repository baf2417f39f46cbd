//! The twin logic, pure (no I/O): what a report or a state change does to a device's
//! [`TwinRecord`], the [`DeviceTwins`] edge apps see (desired values from the Device, reported
//! values from the mapper), the delta between them, and the `devicestatus` report body.
//!
//! Names follow KubeEdge's device twin: per property a *desired* value (KubeEdge MQTT:
//! `expected`; from the Device's `spec.properties[].desired`), a *reported* value (MQTT:
//! `actual`; what the mapper read from the device) and the *observed desired* value (the
//! desired value the mapper last wrote to the device). The *delta* lists the properties
//! whose desired value differs from the reported one.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use verge_device_api::{Device, DeviceModel, StatusReport, Twin, TwinProperty};

use super::error::Error;

/// Longest accepted value of a reported or observed-desired property, in bytes.
pub const MAX_VALUE_BYTES: usize = 16 * 1024;
/// Most metadata entries accepted per value.
pub const MAX_METADATA_ENTRIES: usize = 32;
/// The device states a mapper may report (compared case-insensitively, stored lower-case):
/// KubeEdge edgecore's (`online`, `offline`, `ok`, `unknown`, `disconnected`) and the
/// mapper-framework's (`OK`, `ERROR`, `DISCONNECTED`, `UNHEALTHY`, `UNKNOWN`).
pub const STATES: [&str; 7] = [
    "online",
    "offline",
    "ok",
    "unknown",
    "disconnected",
    "error",
    "unhealthy",
];
/// States that mean "online" and refresh `lastOnlineTime` (KubeEdge: `online`, `ok`).
const ONLINE_STATES: [&str; 2] = ["online", "ok"];
/// A repeated report of an unchanged online state refreshes `lastOnlineTime` only when the
/// stored one is at least this old, so a mapper reporting `OK` every second does not cause
/// a write and an upstream report every second.
pub const LAST_ONLINE_REFRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// One property's stored values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TwinValues {
    /// The value the mapper last read from the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<TwinProperty>,
    /// The desired value the mapper last wrote to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_desired: Option<TwinProperty>,
}

/// What the edge holds of one device's twin (stored as JSON in redb, table
/// `devicetwin_twins`, key `<namespace>/<name>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TwinRecord {
    /// The uid of the Device this record belongs to; a record of another uid (the Device
    /// was deleted and created again) is discarded.
    pub uid: String,
    /// Values by property name.
    #[serde(default)]
    pub twins: BTreeMap<String, TwinValues>,
    /// The last reported device state (lower-case); empty when never reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// When the device was last reported online (RFC 3339, seconds); empty when never.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online_time: String,
}

impl TwinRecord {
    /// An empty record for the Device with `uid`.
    pub fn new(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            ..Self::default()
        }
    }
}

/// One property's twin as edge apps see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PropertyTwin {
    /// The desired value from the Device (`spec.properties[].desired`); `None` when the
    /// Device sets none (e.g. read-only properties).
    pub desired: Option<TwinProperty>,
    /// The value the mapper last read from the device; `None` before the first report.
    pub reported: Option<TwinProperty>,
    /// The desired value the mapper last wrote to the device.
    pub observed_desired: Option<TwinProperty>,
    /// Whether reported values go up to the cloud (the DeviceStatus).
    pub report_to_cloud: bool,
    /// The value type from the DeviceModel (`INT`, `FLOAT`, `DOUBLE`, `STRING`, `BOOLEAN`,
    /// `BYTES`, `STREAM`); empty when the model is missing or says none.
    pub kind: String,
}

/// A device's whole twin: every property of the Device, its state and last online time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTwins {
    /// The Device's namespace.
    pub namespace: String,
    /// The Device's name.
    pub name: String,
    /// Twins by property name (every property of the Device's spec).
    pub twins: BTreeMap<String, PropertyTwin>,
    /// The last reported state (lower-case); empty when never reported.
    pub state: String,
    /// When the device was last reported online (RFC 3339); empty when never.
    pub last_online_time: String,
}

impl DeviceTwins {
    /// The delta: for every property with a desired value that differs from the reported
    /// one (or that was never reported), the desired value (KubeEdge's `twin/update/delta`).
    pub fn delta(&self) -> BTreeMap<String, String> {
        self.twins
            .iter()
            .filter_map(|(name, twin)| {
                let desired = twin.desired.as_ref()?;
                let reported = twin.reported.as_ref().map(|r| r.value.as_str());
                (reported != Some(desired.value.as_str()))
                    .then(|| (name.clone(), desired.value.clone()))
            })
            .collect()
    }
}

/// The result of a change: the device's twin before and after it, and which properties a
/// report named (KubeEdge's `twin/update/document`: `last` and `current`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TwinDocument {
    /// The properties the report named (empty for a state change).
    pub updated: BTreeSet<String>,
    /// The twin before the change.
    pub last: DeviceTwins,
    /// The twin after the change.
    pub current: DeviceTwins,
    /// When the change was applied, Unix milliseconds.
    pub timestamp_ms: i64,
}

impl TwinDocument {
    /// The delta after the change (see [`DeviceTwins::delta`]).
    pub fn delta(&self) -> BTreeMap<String, String> {
        self.current.delta()
    }
}

/// Checks a report of `twins` for `device` before anything is applied: at least one twin,
/// every property named and a property of the Device, values and metadata within bounds.
///
/// # Errors
/// [`Error::NoTwins`], [`Error::UnknownProperty`], [`Error::ValueTooLarge`].
pub fn check_report(device: &Device, twins: &[Twin]) -> Result<(), Error> {
    let (namespace, name) = (device.namespace(), device.name());
    if twins.is_empty() {
        return Err(Error::NoTwins {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    for twin in twins {
        if device.property(&twin.property_name).is_none() {
            return Err(Error::UnknownProperty {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                property: twin.property_name.clone(),
            });
        }
        for value in [&twin.reported, &twin.observed_desired]
            .into_iter()
            .flatten()
        {
            let bytes = value.value.len()
                + value
                    .metadata
                    .iter()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>();
            if bytes > MAX_VALUE_BYTES || value.metadata.len() > MAX_METADATA_ENTRIES {
                return Err(Error::ValueTooLarge {
                    property: twin.property_name.clone(),
                    bytes,
                    max: MAX_VALUE_BYTES,
                });
            }
        }
    }
    Ok(())
}

/// Normalizes a reported state: lower-case, one of [`STATES`].
///
/// # Errors
/// [`Error::InvalidState`] for anything else.
pub fn check_state(state: &str) -> Result<String, Error> {
    let lower = state.trim().to_ascii_lowercase();
    if STATES.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(Error::InvalidState {
            state: state.to_owned(),
        })
    }
}

/// Applies a checked report ([`check_report`]) to `record`: each twin's `reported` and
/// `observedDesired`, when present, replace the stored ones; a value without a
/// `timestamp` in its metadata, or with an empty one, gets `now_ms` (mappers often leave it
/// out; KubeEdge's mapper-framework sends it empty). An entirely
/// empty reported value (no text, no metadata) counts as absent: protobuf cannot tell it
/// from an unset one. An `observedDesired` without a value counts as absent too: mappers
/// send one, with only a `type`, for every property without a desired value. Returns the
/// properties named.
pub fn apply_report(record: &mut TwinRecord, twins: Vec<Twin>, now_ms: i64) -> BTreeSet<String> {
    let present = |v: &TwinProperty| !v.value.is_empty() || !v.metadata.is_empty();
    let mut updated = BTreeSet::new();
    for twin in twins {
        let values = record.twins.entry(twin.property_name.clone()).or_default();
        if let Some(reported) = twin.reported.filter(present) {
            values.reported = Some(stamped(reported, now_ms));
        }
        if let Some(observed) = twin.observed_desired.filter(|v| !v.value.is_empty()) {
            values.observed_desired = Some(stamped(observed, now_ms));
        }
        updated.insert(twin.property_name);
    }
    updated
}

fn stamped(mut value: TwinProperty, now_ms: i64) -> TwinProperty {
    let stamp = value.metadata.entry("timestamp".to_owned()).or_default();
    // KubeEdge's mapper-framework sends the key with an empty value.
    if stamp.trim().is_empty() {
        *stamp = now_ms.to_string();
    }
    value
}

/// Applies a checked state ([`check_state`]) reported at `now`: stores it and, for an online
/// state, refreshes `lastOnlineTime` — unless the state is unchanged and the stored time is
/// younger than [`LAST_ONLINE_REFRESH`]. Returns whether `record` changed.
pub fn apply_state(record: &mut TwinRecord, state: String, now: DateTime<Utc>) -> bool {
    let online = ONLINE_STATES.contains(&state.as_str());
    let mut changed = false;
    if online {
        let fresh = record.state == state
            && DateTime::parse_from_rfc3339(&record.last_online_time)
                .is_ok_and(|t| now.signed_duration_since(t) < LAST_ONLINE_REFRESH);
        if !fresh {
            record.last_online_time = now.to_rfc3339_opts(SecondsFormat::Secs, true);
            changed = true;
        }
    }
    if record.state != state {
        record.state = state;
        changed = true;
    }
    changed
}

/// Drops the values of properties the Device no longer has (after a spec change).
pub fn retain_properties(record: &mut TwinRecord, device: &Device) {
    record
        .twins
        .retain(|name, _| device.property(name).is_some());
}

/// The twin edge apps see: every property of `device` with its desired value, its type
/// from `model`, and the values in `record`.
pub fn view(device: &Device, model: Option<&DeviceModel>, record: &TwinRecord) -> DeviceTwins {
    let twins = device
        .spec
        .properties
        .iter()
        .map(|p| {
            let values = record.twins.get(&p.name).cloned().unwrap_or_default();
            let twin = PropertyTwin {
                desired: p.desired.clone(),
                reported: values.reported,
                observed_desired: values.observed_desired,
                report_to_cloud: p.report_to_cloud,
                kind: model
                    .and_then(|m| m.property(&p.name))
                    .map(|m| m.kind.clone())
                    .unwrap_or_default(),
            };
            (p.name.clone(), twin)
        })
        .collect();
    DeviceTwins {
        namespace: device.namespace().to_owned(),
        name: device.name().to_owned(),
        twins,
        state: record.state.clone(),
        last_online_time: record.last_online_time.clone(),
    }
}

/// The body of the `devicestatus` report: the twins of the `reportToCloud` properties that
/// have a value, ordered by property name, with the state and last online time.
pub fn status_report(device: &Device, record: &TwinRecord) -> StatusReport {
    let twins = record
        .twins
        .iter()
        .filter(|(name, _)| device.property(name).is_some_and(|p| p.report_to_cloud))
        .filter(|(_, v)| v.reported.is_some() || v.observed_desired.is_some())
        .map(|(name, v)| Twin {
            property_name: name.clone(),
            reported: v.reported.clone(),
            observed_desired: v.observed_desired.clone(),
        })
        .collect();
    StatusReport {
        twins,
        state: record.state.clone(),
        last_online_time: record.last_online_time.clone(),
    }
}

#[cfg(test)]
mod tests;
