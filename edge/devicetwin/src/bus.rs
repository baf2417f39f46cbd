//! devicetwin behind the eventbus: [`TwinBus`] implements [`TwinService`] on a
//! [`DeviceTwinHandle`], and [`publish_changes`] publishes every committed twin change on
//! MQTT (KubeEdge's `twin/update/document` and `twin/update/delta`), whoever made it — a
//! mapper over DMI or an edge app over MQTT.
//!
//! Twins on Verge come from the Device: its properties are the twins, their desired values
//! (KubeEdge's `expected`) are set in the cloud. An MQTT twin update may therefore report
//! `actual` values of the Device's properties; an `expected` value, a new property or the
//! deletion of a twin is refused with code 400 and a reason saying so.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, warn};
use verge_device_api::{Twin, TwinProperty};

use super::DeviceTwinHandle;
use super::error::Error;
use super::twin::{DeviceTwins, PropertyTwin, TwinDocument};
use verge_eventbus::payload::{TypeMetadata, ValueMetadata};
use verge_eventbus::{
    DeviceRef, DeviceState, EventBusHandle, MemberDevice, MsgTwin, StateUpdated, TwinDelta,
    TwinDocEntry, TwinError, TwinService, TwinUpdate, TwinUpdateOutcome, TwinValue, Twins,
};

/// devicetwin as the eventbus's [`TwinService`].
#[derive(Debug, Clone)]
pub struct TwinBus {
    twins: DeviceTwinHandle,
}

impl TwinBus {
    /// The service over `twins`.
    pub fn new(twins: DeviceTwinHandle) -> Self {
        Self { twins }
    }
}

impl TwinService for TwinBus {
    fn update(
        &self,
        device: DeviceRef,
        update: TwinUpdate,
    ) -> BoxFuture<'_, Result<TwinUpdateOutcome, TwinError>> {
        Box::pin(async move {
            let reports = reports(&update)?;
            let span =
                super::trace::mqtt_update_span(&device.namespace, &device.name, reports.len());
            let reported = self
                .twins
                .report(&device.namespace, &device.name, reports)
                .instrument(span.clone())
                .await;
            if reported.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            reported.map_err(|e| twin_error(&device, e))?;
            // The document and delta of the change are published by `publish_changes`, as
            // for every change, so they are not returned here (no double publication).
            Ok(TwinUpdateOutcome {
                changed: update.twins,
                document: BTreeMap::new(),
                delta: None,
            })
        })
    }

    fn get(&self, device: DeviceRef) -> BoxFuture<'_, Result<Twins, TwinError>> {
        Box::pin(async move {
            let twins = self
                .twins
                .get(&device.namespace, &device.name)
                .await
                .map_err(|e| twin_error(&device, e))?;
            Ok(msg_twins(&twins))
        })
    }

    fn set_state(
        &self,
        device: DeviceRef,
        state: DeviceState,
    ) -> BoxFuture<'_, Result<StateUpdated, TwinError>> {
        Box::pin(async move {
            let document = self
                .twins
                .set_state(&device.namespace, &device.name, state.as_str())
                .await
                .map_err(|e| twin_error(&device, e))?;
            let last = document.current.last_online_time;
            Ok(StateUpdated {
                last_online: (!last.is_empty()).then_some(last),
            })
        })
    }

    fn members(&self) -> BoxFuture<'_, Result<Vec<MemberDevice>, TwinError>> {
        Box::pin(async move {
            let devices = self
                .twins
                .list()
                .await
                .map_err(|e| TwinError::Store(Box::new(e)))?;
            Ok(devices
                .into_iter()
                .map(|d| MemberDevice {
                    id: format!("{}/{}", d.namespace, d.name),
                    name: d.name,
                    description: String::new(),
                    state: d.state,
                    last_online: d.last_online_time,
                })
                .collect())
        })
    }
}

/// The DMI-style reports of an MQTT twin update: each twin's `actual` value becomes the
/// property's reported value (typed by the update's metadata).
fn reports(update: &TwinUpdate) -> Result<Vec<Twin>, TwinError> {
    let refuse = |property: &str, reason: &str| TwinError::InvalidProperty {
        property: property.to_owned(),
        reason: reason.to_owned(),
    };
    let mut out = Vec::with_capacity(update.twins.len());
    for (property, twin) in &update.twins {
        let Some(twin) = twin else {
            return Err(refuse(
                property,
                "twins are the Device's properties; they cannot be deleted from the edge",
            ));
        };
        if twin.expected.is_some() {
            return Err(refuse(
                property,
                "expected values are the Device's desired values (spec.properties[].desired); set them in the cloud",
            ));
        }
        let Some(value) = twin.actual.as_ref().and_then(|a| a.value.clone()) else {
            return Err(refuse(property, "no actual value"));
        };
        let mut metadata = BTreeMap::new();
        if let Some(kind) = twin.metadata.as_ref().and_then(|m| m.type_.clone()) {
            metadata.insert("type".to_owned(), kind);
        }
        out.push(Twin {
            property_name: property.clone(),
            reported: Some(TwinProperty { value, metadata }),
            observed_desired: None,
        });
    }
    Ok(out)
}

/// The eventbus error of a devicetwin error for `device`.
fn twin_error(device: &DeviceRef, error: crate::error::Error) -> TwinError {
    match error {
        Error::UnknownDevice { .. } => TwinError::DeviceNotFound(device.clone()),
        Error::UnknownProperty { property, .. } => TwinError::InvalidProperty {
            property,
            reason: format!("not a property of device {device}"),
        },
        e @ (Error::NoTwins { .. } | Error::InvalidState { .. }) => TwinError::InvalidProperty {
            property: String::new(),
            reason: e.to_string(),
        },
        Error::ValueTooLarge {
            property,
            bytes,
            max,
        } => TwinError::InvalidProperty {
            property,
            reason: format!("the value is {bytes} bytes (at most {max})"),
        },
        other => TwinError::Store(Box::new(other)),
    }
}

/// A device's twins as MQTT messages show them: `expected` the desired value, `actual` the
/// reported one, the model's type.
fn msg_twins(twins: &DeviceTwins) -> Twins {
    twins
        .twins
        .iter()
        .map(|(name, twin)| (name.clone(), msg_twin(twin)))
        .collect()
}

fn msg_twin(twin: &PropertyTwin) -> MsgTwin {
    let value = |p: &TwinProperty| TwinValue {
        value: Some(p.value.clone()),
        metadata: p
            .metadata
            .get("timestamp")
            .and_then(|t| t.parse().ok())
            .map(|timestamp| ValueMetadata {
                timestamp: Some(timestamp),
            }),
    };
    MsgTwin {
        expected: twin.desired.as_ref().map(value),
        actual: twin.reported.as_ref().map(value),
        optional: Some(false),
        metadata: (!twin.kind.is_empty()).then(|| TypeMetadata {
            type_: Some(twin.kind.to_lowercase()),
        }),
    }
}

/// Publishes every committed twin change on `bus` until `stop`: the document of the
/// properties a report named (last and current) and, when desired and reported differ,
/// the delta.
pub async fn publish_changes(
    twins: DeviceTwinHandle,
    bus: EventBusHandle,
    stop: CancellationToken,
) {
    let mut changes = twins.subscribe();
    loop {
        let change = tokio::select! {
            () = stop.cancelled() => return,
            change = changes.recv() => change,
        };
        match change {
            Ok(document) => publish(&bus, &document),
            Err(RecvError::Lagged(n)) => warn!(missed = n, "eventbus fell behind twin changes"),
            Err(RecvError::Closed) => return,
        }
    }
}

fn publish(bus: &EventBusHandle, document: &Arc<TwinDocument>) {
    let device = DeviceRef::new(&document.current.namespace, &document.current.name);
    if document.updated.is_empty() {
        return;
    }
    let entries: BTreeMap<String, TwinDocEntry> = document
        .updated
        .iter()
        .map(|p| {
            let entry = TwinDocEntry {
                last: document.last.twins.get(p).map(msg_twin),
                current: document.current.twins.get(p).map(msg_twin),
            };
            (p.clone(), entry)
        })
        .collect();
    let event_id = format!("twin-{}", document.timestamp_ms);
    if let Err(error) = bus.publish_document(&device, &event_id, &entries) {
        debug!(%device, %error, "twin document not published");
    }
    if let Some(delta) = TwinDelta::of(&msg_twins(&document.current))
        && let Err(error) = bus.publish_delta(&device, &delta)
    {
        debug!(%device, %error, "twin delta not published");
    }
}
