//! `update <ns>/devicestatus/<name>`: a Device's reported twins, state and last online time,
//! written into the DeviceStatus of the same name and namespace (KubeEdge v1.23 keeps them
//! there, under `.status`; the CRD has no status subresource, so the whole object is
//! written).
//!
//! The write is a server-side apply (field manager `devicecontroller`, forced): it creates
//! the DeviceStatus when absent and otherwise replaces what devicecontroller wrote before —
//! `status.twins` as a whole (the report is the device's whole current twin state), `state`
//! and `lastOnlineTime` when reported — and sets the Device (with its uid) as controlling
//! owner, so the DeviceStatus is garbage-collected with its Device. Fields others wrote
//! (e.g. `status.extensions`) stay.
//!
//! Before writing, the report's uid is compared with the Device's: a report for a Device
//! that was deleted or replaced (another uid) is dropped and acknowledged, so the edge
//! forgets it. The Device comes from the watch cache, and from the API server when the
//! cache does not have it at that uid (the cache may lag behind a new Device).

use std::sync::Arc;

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{Instrument as _, info};
use verge_device_api::{API_VERSION, StatusReport};

use super::{Context, DeviceReport};
use crate::cache::{device_resource, status_resource};
use crate::desired::node_name;
use crate::{Error, Result};

/// The field manager of devicecontroller's writes.
pub const FIELD_MANAGER: &str = "devicecontroller";

/// What a report led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The DeviceStatus was created or updated.
    Applied,
    /// The Device does not exist: nothing was written.
    DeviceGone,
    /// The Device was replaced (it has another uid now): nothing was written.
    Replaced,
}

/// Writes `report` from `node` into its DeviceStatus (see the module docs).
///
/// # Errors
/// [`Error::Forbidden`] when the Device is not bound to `node`; [`Error::Kube`] when the
/// Device cannot be read or the DeviceStatus not written.
pub async fn write(context: &Context, node: &str, report: &DeviceReport) -> Result<Written> {
    let Some(device) = current_device(context, report).await? else {
        info!(namespace = %report.namespace, device = %report.name,
            "status report for a device that no longer exists dropped");
        return Ok(Written::DeviceGone);
    };
    if device.metadata.uid.as_deref() != Some(report.uid.as_str()) {
        info!(namespace = %report.namespace, device = %report.name, uid = %report.uid,
            "status report for a replaced device dropped");
        return Ok(Written::Replaced);
    }
    let bound = node_name(&device);
    if bound != Some(node) {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!(
                "the status of device {}/{} (bound to {})",
                report.namespace,
                report.name,
                bound.map_or_else(|| "no node".to_owned(), |n| format!("{n:?}"))
            ),
        });
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        context.client.clone(),
        &report.namespace,
        &status_resource(),
    );
    let object = status_object(&device, &report.report);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&report.name, &params, &Patch::Apply(&object))
        .instrument(verge_telemetry::propagation::in_trace(|| {
            verge_telemetry::span!(
                "kube.apply_device_status",
                k8s.namespace.name = %report.namespace,
                verge.device.name = %report.name,
                verge.device.uid = %report.uid,
            )
        }))
        .await
        .map_err(Error::kube("apply devicestatus"))?;
    Ok(Written::Applied)
}

/// The Device the report is for: from the cache when it has it at the report's uid, else
/// from the API server (`None`: it does not exist).
async fn current_device(
    context: &Context,
    report: &DeviceReport,
) -> Result<Option<Arc<DynamicObject>>> {
    if let Some(device) = context.caches.device(&report.namespace, &report.name)
        && device.metadata.uid.as_deref() == Some(report.uid.as_str())
    {
        return Ok(Some(device));
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        context.client.clone(),
        &report.namespace,
        &device_resource(),
    );
    let device = api
        .get_opt(&report.name)
        .await
        .map_err(Error::kube("get device"))?;
    Ok(device.map(Arc::new))
}

/// The DeviceStatus devicecontroller applies for `device`: same name and namespace, the
/// Device as controlling owner, an empty spec and `status` = `report` (twins, and state and
/// lastOnlineTime when reported).
pub fn status_object(device: &DynamicObject, report: &StatusReport) -> Value {
    let name = device.metadata.name.clone().unwrap_or_default();
    let namespace = device.metadata.namespace.clone().unwrap_or_default();
    let uid = device.metadata.uid.clone().unwrap_or_default();
    json!({
        "apiVersion": API_VERSION,
        "kind": "DeviceStatus",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": API_VERSION,
                "kind": "Device",
                "name": name,
                "uid": uid,
                "controller": true,
            }],
        },
        "spec": {},
        "status": report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_object_is_owned_by_the_device() {
        let device: DynamicObject = serde_json::from_value(json!({
            "apiVersion": API_VERSION, "kind": "Device",
            "metadata": { "name": "t", "namespace": "ns", "uid": "u-1" },
        }))
        .expect("device");
        let report: StatusReport = serde_json::from_value(json!({
            "twins": [{ "propertyName": "temp",
                "reported": { "value": "23", "metadata": { "timestamp": "1", "type": "int" } } }],
            "state": "online"
        }))
        .expect("report");
        let object = status_object(&device, &report);
        assert_eq!(object["kind"], "DeviceStatus");
        assert_eq!(object["metadata"]["name"], "t");
        let owner = &object["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["uid"]),
            (&json!("Device"), &json!("u-1"))
        );
        assert_eq!(owner["controller"], true);
        assert_eq!(object["status"]["twins"][0]["reported"]["value"], "23");
        assert_eq!(object["status"]["state"], "online");
        assert!(object["status"].get("lastOnlineTime").is_none());
    }
}
