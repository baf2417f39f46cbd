//! The JSON payloads of KubeEdge's device topics, field for field (KubeEdge
//! `devicetwin/dttype`): snake_case names, values always strings, timestamps in milliseconds
//! since the Unix epoch. Unknown input fields are ignored (KubeEdge's version fields among
//! them: Verge keeps versions to itself and never publishes them); a known field of the wrong
//! type fails the whole message.
//!
//! # Layout
//! - [`twin`]: one twin ([`MsgTwin`]) and the delta of a device's twins ([`twin_delta`]).
//! - [`messages`]: the twin update, get and error messages.
//! - [`device`]: device states and membership.

pub mod device;
pub mod messages;
pub mod twin;

pub use device::{
    DeviceState, DeviceStateInfo, MemberDevice, MembershipGetResult, MembershipUpdate,
    StateUpdateMessage, StateUpdateResult,
};
pub use messages::{
    BaseMessage, ErrorResult, TwinDeltaMessage, TwinDocEntry, TwinDocument, TwinGetResult,
    TwinUpdateMessage, TwinUpdateResult,
};
pub use twin::{MsgTwin, TwinValue, Twins, TypeMetadata, ValueMetadata, is_deleted, twin_delta};
