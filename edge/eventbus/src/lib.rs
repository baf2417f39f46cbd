//! eventbus: edgecore's MQTT client for edge applications and mappers (KubeEdge: eventbus,
//! external MQTT mode), speaking KubeEdge's device topics and JSON so existing apps keep
//! working.
//!
//! [`EventBus::run`] connects to the broker (`eventBus.mqttServer`, with the configured
//! credentials), subscribes to [`topic::SUBSCRIPTIONS`] and answers each request:
//!
//! | request topic (`$hw/events/...`) | answers |
//! |---|---|
//! | `device/<ns>/<name>/twin/update` | `.../twin/update/result`; `.../twin/update/document` when something changed; `.../twin/update/delta` when an expected value differs from the actual one |
//! | `device/<ns>/<name>/twin/get` | `.../twin/get/result` |
//! | `device/<ns>/<name>/state/update` | `.../state/update/result` |
//! | `node/<node>/membership/get` | `node/<node>/membership/get/result` |
//!
//! A request that cannot be served (not JSON, a field of the wrong type, an invalid property
//! name or value, an unknown device or state) gets an [`ErrorResult`] with code 400/404/500
//! and a reason on its result topic, and affects nothing else. (KubeEdge publishes parse
//! errors of twin updates on `$hw/events/device//twin/update/result` and ignores bad state
//! updates; Verge answers on the device's own result topic in every case.) The connection is
//! re-established with jittered exponential backoff and the subscriptions renewed; a broker
//! that is down never stops edgecore.
//!
//! The twin logic is not here: the eventbus reaches it only through [`TwinService`], which
//! devicetwin implements. Devicetwin in turn publishes what it learns elsewhere (DMI reports,
//! desired values from the cloud) through an [`EventBusHandle`].
//!
//! # Layout
//! - `lib.rs`: [`TwinService`] and the types it speaks ([`DeviceRef`], [`TwinUpdate`],
//!   [`TwinUpdateOutcome`], [`TwinError`], ...).
//! - [`topic`]: parsing request topics, building answer topics.
//! - [`payload`]: the JSON payloads, field for field as KubeEdge's.
//! - `request`: decoding and checking a request's payload.
//! - `dispatch`: serving one request through the [`TwinService`].
//! - `outgoing`: building the published messages.
//! - `handle`: [`EventBusHandle`], publishing without blocking.
//! - `client`: [`EventBus`]: the connection, subscriptions and reconnects.
//! - `address`: [`BrokerAddress`], the parsed `mqttServer`.
//! - [`config`]: [`EventBusConfig`], the `eventBus:` section of edgecore's configuration
//!   file (edgecore owns the file; this crate owns its section).
//! - [`error`]: the crate's [`Error`].
//!
//! The crate sits above `verge-core` and `verge-runtime` only: devicetwin (through
//! [`TwinService`]) and the apps bridge (the broker address and credentials) build on it.

pub mod acl;
mod address;
mod client;
pub mod config;
mod dispatch;
pub mod error;
mod handle;
mod outgoing;
pub mod payload;
mod request;
pub mod topic;

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;

pub use address::{AddressError, BrokerAddress};
pub use client::EventBus;
pub use client::read_password;
pub use config::{EventBusConfig, MqttClient, MqttQos};
pub use error::Error;
pub use handle::EventBusHandle;
pub use payload::{
    DeviceState, ErrorResult, MemberDevice, MsgTwin, TwinDocEntry, TwinValue, Twins, twin_delta,
};
pub use request::{RequestError, check_twin_update, state_update, twin_update};

/// A device, as topics name it: `<namespace>/<name>` (KubeEdge's device id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRef {
    /// The Device's namespace.
    pub namespace: String,
    /// The Device's name.
    pub name: String,
}

impl DeviceRef {
    /// The device `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A checked twin update (from MQTT, or built by devicetwin from a DMI report): per
/// property the new expected and/or actual value and type, or `None` to delete an optional
/// twin. Property names and values already passed [`check_twin_update`]; types are the
/// twin logic's to check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TwinUpdate {
    /// The client's event id (echoed in the answers; may be empty).
    pub event_id: String,
    /// The twins to change.
    pub twins: BTreeMap<String, Option<MsgTwin>>,
}

/// What one twin update changed, as the twin logic reports it (KubeEdge `DealDeviceTwin`):
/// published as `.../twin/update/result`, `.../document` and `.../delta`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TwinUpdateOutcome {
    /// Each changed twin as stored now, with edgecore's timestamps (`None`: deleted). The
    /// `twin` of the update result (published even when empty).
    pub changed: BTreeMap<String, Option<MsgTwin>>,
    /// Each changed twin before and after; the update document is published only when this
    /// is not empty.
    pub document: BTreeMap<String, TwinDocEntry>,
    /// The delta over all of the device's twins after the change ([`twin_delta`]); the update
    /// delta is published only when set.
    pub delta: Option<TwinDelta>,
}

/// The twins whose expected value differs from the actual one ([`twin_delta`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TwinDelta {
    /// Every twin that has an expected value.
    pub twins: Twins,
    /// Property name to expected value, for each twin that differs.
    pub delta: BTreeMap<String, String>,
}

impl TwinDelta {
    /// The delta of `twins` (all of a device's twins), `None` when nothing differs.
    pub fn of(twins: &Twins) -> Option<Self> {
        twin_delta(twins).map(|(twins, delta)| Self { twins, delta })
    }
}

/// The result of a state change: what devicetwin stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateUpdated {
    /// When the device was last online, in devicetwin's format (KubeEdge:
    /// `2006-01-02 15:04:05` local time); `None` when never.
    pub last_online: Option<String>,
}

/// Why the twin logic refused a request; the eventbus answers with [`TwinError::code`] and the
/// error's text as the reason.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// The device is not on this node (code 404).
    #[error("device {0} is not on this node")]
    DeviceNotFound(DeviceRef),
    /// A value does not fit the twin (code 400), e.g. `"abc"` for an `int` twin.
    #[error("property {property:?}: {reason}")]
    InvalidProperty {
        /// The property.
        property: String,
        /// What is wrong, e.g. `the value is not an integer`.
        reason: String,
    },
    /// The twin store failed (code 500).
    #[error("twin store failed")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl TwinError {
    /// The code of the error result: 404, 400 or 500.
    pub fn code(&self) -> u16 {
        match self {
            Self::DeviceNotFound(_) => 404,
            Self::InvalidProperty { .. } => 400,
            Self::Store(_) => 500,
        }
    }
}

/// The twin logic, as the eventbus sees it; devicetwin implements it (the lead wires it),
/// tests fake it. Every call is for one device and may run while others wait: keep them short
/// (a redb transaction, no mapper calls).
pub trait TwinService: Send + Sync + 'static {
    /// Applies a twin update (KubeEdge `DealDeviceTwin`): all or nothing; expected/actual
    /// values replace the stored ones and are stamped with the current time; `None` deletes
    /// an optional twin; new twins default to `optional: true`, type `string`. Reported
    /// values of reportToCloud properties go to the cloud as devicetwin does for DMI reports.
    ///
    /// # Errors
    /// [`TwinError::DeviceNotFound`], [`TwinError::InvalidProperty`] (a value not of the
    /// twin's type), [`TwinError::Store`].
    fn update(
        &self,
        device: DeviceRef,
        update: TwinUpdate,
    ) -> BoxFuture<'_, Result<TwinUpdateOutcome, TwinError>>;

    /// Every twin of the device that is not deleted (KubeEdge `DealGetTwin`).
    ///
    /// # Errors
    /// [`TwinError::DeviceNotFound`], [`TwinError::Store`].
    fn get(&self, device: DeviceRef) -> BoxFuture<'_, Result<Twins, TwinError>>;

    /// Stores the device's state (and, for an online state, the last-online time) and
    /// reports it to the cloud.
    ///
    /// # Errors
    /// [`TwinError::DeviceNotFound`], [`TwinError::Store`].
    fn set_state(
        &self,
        device: DeviceRef,
        state: DeviceState,
    ) -> BoxFuture<'_, Result<StateUpdated, TwinError>>;

    /// The node's devices, for `membership/get` (id `<ns>/<name>`, name, description, state,
    /// last online).
    ///
    /// # Errors
    /// [`TwinError::Store`].
    fn members(&self) -> BoxFuture<'_, Result<Vec<MemberDevice>, TwinError>>;
}
