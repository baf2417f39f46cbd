//! KubeEdge's device API, `devices.kubeedge.io/v1beta1`, as plain serde types shared by
//! devicecontroller (cloud) and edgecore's devicetwin (edge).
//!
//! The shapes follow KubeEdge v1.23 (`pkg/apis/devices/v1beta1`): a [`Device`] names its
//! [`DeviceModel`] (`spec.deviceModelRef.name`, same namespace), the node it lives on
//! (`spec.nodeName`), the protocol a mapper speaks to it with, and its properties with a
//! desired value and visitor configuration; a [`DeviceModel`] describes the properties
//! (type, access mode, range, unit). What the edge reports travels as a [`StatusReport`]
//! and lands in the `DeviceStatus` object of the same name.
//!
//! Fields this crate does not interpret (e.g. `pushMethod`, `methods`) are kept as raw
//! JSON so that nothing a user wrote is lost on the way to the mapper. Unknown fields are
//! ignored on read (API objects gain fields over releases).
//!
//! # Layout
//! - [`types`]: [`Device`], [`DeviceModel`] and their parts.
//! - [`status`]: [`Twin`], [`TwinProperty`], [`StatusReport`].
//! - [`check`]: [`check_device`], the validation both sides apply ([`Invalid`]).

pub mod check;
pub mod status;
pub mod types;

pub use check::{Invalid, check_device};
pub use status::{StatusReport, Twin, TwinProperty};
pub use types::{
    ConfigData, Device, DeviceModel, DeviceModelSpec, DeviceProperty, DeviceSpec, ModelProperty,
    ProtocolConfig, VisitorConfig,
};

/// The API group of KubeEdge's device resources.
pub const GROUP: &str = "devices.kubeedge.io";

/// The served (and stored) version.
pub const VERSION: &str = "v1beta1";

/// `apiVersion` of every object of this API: `devices.kubeedge.io/v1beta1`.
pub const API_VERSION: &str = "devices.kubeedge.io/v1beta1";
