//! Device states (`state/update` in, its result out) and the node's membership.

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_in_any_case() {
        assert_eq!(DeviceState::parse("ONLINE"), Some(DeviceState::Online));
        assert_eq!(DeviceState::parse("Ok"), Some(DeviceState::Ok));
        assert_eq!(DeviceState::parse("busy"), None);
        assert!(DeviceState::Ok.is_online() && !DeviceState::Offline.is_online());
    }
}
