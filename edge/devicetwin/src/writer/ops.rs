//! The writer's operations ([`Op`]), their answers, and the `devicestatus` report it
//! commits.

use std::sync::Arc;

use tokio::sync::oneshot;
use verge_core::{
    Envelope, Group, Kind, Module, ObjectVersion, ResourceKey, ResourceType, TraceContext, Write,
};
use verge_device_api::Twin;

use crate::devices::{DeviceId, StoredDevice};
use crate::error::Error;
use crate::error::Result;
use crate::twin::{DeviceTwins, TwinDocument};

/// An answer channel.
pub(crate) type Reply<T> = oneshot::Sender<Result<T>>;

/// One operation on the twins.
#[derive(Debug)]
pub(crate) enum Op {
    /// Reported and observed-desired values of some properties.
    Report {
        id: DeviceId,
        twins: Vec<Twin>,
        /// The caller's trace (e.g. an MQTT update's), continued by the report it causes.
        trace: TraceContext,
        reply: Reply<TwinDocument>,
    },
    /// A device state.
    State {
        id: DeviceId,
        state: String,
        /// As for `Report`.
        trace: TraceContext,
        reply: Reply<TwinDocument>,
    },
    /// The current twin.
    Get {
        id: DeviceId,
        reply: Reply<DeviceTwins>,
    },
    /// The current twin of every Device.
    List { reply: Reply<Vec<DeviceTwins>> },
    /// The Device changed or went: drop its record (gone or replaced), or the values of
    /// properties it no longer has.
    Sync { id: DeviceId },
    /// As `Sync`, for every record (after a relist).
    SyncAll,
}

/// An answer to send after the commit.
pub(super) enum Answer {
    Document(Reply<TwinDocument>, Result<TwinDocument>),
    Twins(Reply<DeviceTwins>, Result<DeviceTwins>),
    List(Reply<Vec<DeviceTwins>>, Result<Vec<DeviceTwins>>),
}

impl Answer {
    pub(super) fn send(self) {
        // A caller that stopped waiting is fine.
        match self {
            Self::Document(reply, result) => {
                let _ = reply.send(result);
            }
            Self::Twins(reply, result) => {
                let _ = reply.send(result);
            }
            Self::List(reply, result) => {
                let _ = reply.send(result);
            }
        }
    }

    /// Answers with the commit failure (a caller's own error, e.g. an unknown property, is
    /// kept: nothing of its would have been stored anyway).
    pub(super) fn fail(self, error: &Arc<crate::error::Error>) {
        let failed = || Error::NotStored(Arc::clone(error));
        match self {
            Self::Document(reply, result) => {
                let _ = reply.send(result.and_then(|_| Err(failed())));
            }
            Self::Twins(reply, result) => {
                let _ = reply.send(result.and_then(|_| Err(failed())));
            }
            Self::List(reply, result) => {
                let _ = reply.send(result.and_then(|_| Err(failed())));
            }
        }
    }
}

/// The `update <ns>/devicestatus/<name>` report of `device` (header uid: the Device's).
pub(super) fn status_message(
    device: &StoredDevice,
    report: &verge_device_api::StatusReport,
) -> Result<Envelope> {
    let body = serde_json::to_vec(report).map_err(|source| crate::error::Error::Encode {
        what: "device status",
        source,
    })?;
    let kind = Kind::Upsert {
        write: Write::Update,
        key: ResourceKey::new(
            device.device.namespace(),
            ResourceType::DeviceStatus,
            device.device.name(),
        ),
        version: ObjectVersion::uid(device.uid.clone()),
    };
    Ok(Envelope::new(Module::DeviceTwin, Group::Device, kind, body))
}
