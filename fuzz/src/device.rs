//! Target `device_json`: a JSON document `{"device": <Device>, "model": <DeviceModel>}` (each
//! part may be missing or of any shape) → the Device checks both devicecontroller and the edge
//! apply (`verge_device_api::check_device`) → edgecore's conversion into the DMI `Device` a
//! mapper receives.
//!
//! Properties: nothing panics; a Device that passes the check (its model present) converts to
//! DMI without error — the check is what keeps unconvertible `configData` (objects, arrays)
//! from mappers, as docs/devices.md says — and keeps its name, namespace and properties.

use verge_edgecore::StoredObject;
use verge_edgecore::devicetwin::dmi::convert;
use verge_edgecore::devicetwin::{DeviceId, devices::StoredDevice, devices::StoredModel};

/// Parses `data` and checks the properties above.
pub fn check(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let id = DeviceId::new("fuzz", "device");
    let stored = |part: &str| StoredObject {
        uid: "uid".to_owned(),
        resource_version: "1".to_owned(),
        content: serde_json::to_vec(&value[part]).unwrap_or_default(),
    };
    let Ok(device) = StoredDevice::parse(&id, &stored("device")) else {
        return;
    };
    let model = StoredModel::parse(&DeviceId::new("fuzz", "model"), &stored("model")).ok();
    let checked = verge_device_api::check_device(&device.device, model.as_ref().map(|m| &m.model));
    let (Ok(()), Some(model)) = (checked, model) else {
        return;
    };
    let merged = convert::merged(&device, &model).expect("a checked Device merges");
    let dmi = convert::device(&device, &merged, None)
        .unwrap_or_else(|e| panic!("a checked Device converts to DMI: {e}"));
    assert_eq!(dmi.name, device.device.name());
    assert_eq!(dmi.namespace, device.device.namespace());
    let spec = dmi.spec.expect("the DMI spec is always sent");
    assert_eq!(spec.properties.len(), device.device.spec.properties.len());
}
