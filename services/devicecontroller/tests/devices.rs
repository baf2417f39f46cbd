//! Component test: devicecontroller against a real API server (verge-testkit) with the
//! device CRDs installed, acting as its service account with the RBAC of
//! `deploy/cloud/access/rbac.yaml`, and an in-test ControllerHub playing cloudhub.

mod common;

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use verge_core::{Group, Operation};
use verge_devicecontroller::Config;
use verge_devicecontroller::cache::{device_resource, model_resource, status_resource};
use verge_proto::{Inventory, InventoryEntry, Message, MessageExt};
use verge_testkit::wait::wait_for;

use common::{Controller, Hub, WAIT, reason};

/// The service account devicecontroller runs as.
const ACCOUNT: &str = "system:serviceaccount:verge-system:devicecontroller";

#[tokio::test]
async fn devices_go_to_their_node_and_reports_reach_device_status() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    verge_testkit::install_device_crds(&cp).await?;
    verge_testkit::install_cloud_rbac(&cp).await?;
    let admin = cp.client().await?;
    let client = cp.client_as(ACCOUNT).await?;

    let (addr, mut attaches) = common::start().await?;
    let config = Config {
        cloudhub: vec![format!("https://{addr}")],
        cloudhub_auth: common::hub_auth(),
        // Acting as the service account, whose Lease rights name only the `devicecontroller`
        // Lease (which a deployed devicecontroller on the shared control plane may hold):
        // no election here; the leader tests cover it.
        leader_election: common::no_leader_election(),
        ..Config::default()
    };
    let controller = Controller::spawn(config, client);
    let (mut h, hello) = common::next_hello(&mut attaches).await?;
    assert_eq!(hello.name, "devicecontroller");
    assert_eq!(hello.groups, ["device".to_owned()]);

    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let ns = format!("dc-it-{id}");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    let result = tokio::time::timeout(
        Duration::from_secs(180),
        scenario(&mut h, &admin, &ns, &format!("dc-edge-{id}")),
    )
    .await
    .context("scenario timed out")
    .and_then(|r| r);

    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    controller.stop().await?;
    result
}

fn model(name: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": { "name": name },
        "spec": { "protocol": "virtual", "properties": [
            { "name": "temp", "type": "INT", "accessMode": "ReadWrite" }] }
    }))?)
}

fn device(name: &str, model: &str, node: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": { "name": name },
        "spec": {
            "deviceModelRef": { "name": model },
            "nodeName": node,
            "protocol": { "protocolName": "virtual", "configData": { "id": 1 } },
            "properties": [{ "name": "temp", "reportToCloud": true,
                "desired": { "value": "20" },
                "visitors": { "protocolName": "virtual", "configData": { "min": 0 } } }],
            "stateReport": { "reportCycle": 5000, "reportToCloud": true }
        }
    }))?)
}

/// `update node/<node>/<ns>/devicestatus/<name>` for the Device with `uid`.
fn report(node: &str, ns: &str, name: &str, uid: &str, body: &Value) -> Message {
    Message::build(
        uuid::Uuid::new_v4().to_string(),
        "devicetwin",
        Group::Device,
        Operation::Update,
        format!("node/{node}/{ns}/devicestatus/{name}"),
        body.to_string().into_bytes(),
    )
    .with_object(uid, "")
}

fn twins(value: &str, state: &str) -> Value {
    json!({
        "twins": [{ "propertyName": "temp",
            "reported": { "value": value, "metadata": { "timestamp": "1700000000000", "type": "int" } },
            "observedDesired": { "value": "20" } }],
        "state": state,
        "lastOnlineTime": "2026-01-01T00:00:00Z"
    })
}

/// Whether `m` is `operation` of `resource`.
fn is(m: &Message, operation: Operation, resource: &str) -> bool {
    m.operation() == Ok(operation) && m.resource() == resource
}

async fn scenario(h: &mut Hub, admin: &kube::Client, ns: &str, node: &str) -> anyhow::Result<()> {
    let devices: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &device_resource());
    let models: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &model_resource());
    let statuses: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &status_resource());
    let pp = PostParams::default();
    models.create(&pp, &model("thermo")?).await?;
    let t1 = devices.create(&pp, &device("t1", "thermo", node)?).await?;
    let t1_uid = t1.metadata.uid.clone().unwrap_or_default();
    // A Device whose model does not exist: held back, with a Warning event.
    devices.create(&pp, &device("lost", "nope", node)?).await?;

    // The node connects with an empty inventory: model and device, then the marker.
    h.connect(node, Inventory::default()).await?;
    let dev_path = |name: &str| format!("node/{node}/{ns}/device/{name}");
    let model_path = |name: &str| format!("node/{node}/{ns}/devicemodel/{name}");
    h.expect(node, "model update", |m| {
        is(m, Operation::Update, &model_path("thermo"))
    })
    .await?;
    let sent = h
        .expect(node, "device update", |m| {
            is(m, Operation::Update, &dev_path("t1"))
        })
        .await?;
    let body: Value = serde_json::from_slice(&sent.content)?;
    ensure!(body["kind"] == "Device" && body["spec"]["stateReport"]["reportCycle"] == 5000);
    ensure!(sent.header.as_ref().map(|h| h.uid.as_str()) == Some(t1_uid.as_str()));
    let marker = format!("node/{node}/_/device/{node}");
    h.expect(node, "resync marker", |m| is(m, Operation::Resync, &marker))
        .await?;

    // Resync by inventory: the node reconnects holding t1 and its model at their versions,
    // a Device deleted meanwhile and a pod: only the stale Device is deleted.
    let thermo = models.get("thermo").await?;
    let entry = |kind: &str, name: &str, uid: &str, rv: &str| InventoryEntry {
        r#type: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
        resource_version: rv.into(),
    };
    let version = |meta: &kube::api::ObjectMeta| {
        (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        )
    };
    let ((t1u, t1v), (mu, mv)) = (version(&t1.metadata), version(&thermo.metadata));
    let inventory = Inventory {
        entries: vec![
            entry("device", "t1", &t1u, &t1v),
            entry("devicemodel", "thermo", &mu, &mv),
            entry("device", "gone", "u-gone", "1"),
            entry("pod", "p", "u-p", "1"),
        ],
    };
    h.clear();
    h.connect(node, inventory).await?;
    let gone = h
        .expect(node, "stale device delete", |m| {
            is(m, Operation::Delete, &dev_path("gone"))
        })
        .await?;
    ensure!(gone.header.as_ref().map(|h| h.uid.as_str()) == Some("u-gone"));
    let end = h
        .expect(node, "resync marker", |m| is(m, Operation::Resync, &marker))
        .await?;
    let summary: Value = serde_json::from_slice(&end.content)?;
    ensure!(
        summary == json!({ "updates": 0, "deletes": 1 }),
        "{summary}"
    );
    ensure!(
        h.summary().is_empty(),
        "more than the diff: {:?}",
        h.summary()
    );

    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    let event = wait_for("the DeviceModelNotFound event", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("lost")))
        }
    })
    .await?;
    assert_eq!(event.reason.as_deref(), Some("DeviceModelNotFound"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("devicecontroller")
    );
    let note = event.note.unwrap_or_default();
    ensure!(
        note.contains(&format!("device model {ns}/nope not found")),
        "{note}"
    );

    reports(h, &statuses, ns, node, &t1_uid).await?;

    // Until now (the event and several round trips later) the invalid Device was not sent.
    let sent = h.summary();
    ensure!(
        !sent.iter().any(|(_, _, r)| r == &dev_path("lost")),
        "the invalid device was sent: {sent:?}"
    );
    // The missing model appears: the held-back Device goes down now, after its model.
    models.create(&pp, &model("nope")?).await?;
    h.expect(node, "model update", |m| {
        is(m, Operation::Update, &model_path("nope"))
    })
    .await?;
    h.expect(node, "device update", |m| {
        is(m, Operation::Update, &dev_path("lost"))
    })
    .await?;

    // A status-only change is not sent; a new desired value is.
    let status_patch = Patch::Merge(json!({ "status": { "reportToCloud": true } }));
    devices
        .patch("t1", &PatchParams::default(), &status_patch)
        .await?;
    let desired = Patch::Merge(json!({ "spec": { "properties": [{ "name": "temp",
        "reportToCloud": true, "desired": { "value": "23" },
        "visitors": { "protocolName": "virtual", "configData": { "min": 0 } } }] } }));
    let patched = devices
        .patch("t1", &PatchParams::default(), &desired)
        .await?;
    let sent = h
        .expect(node, "device update", |m| {
            is(m, Operation::Update, &dev_path("t1"))
        })
        .await?;
    let rv = sent.header.as_ref().map(|h| h.resource_version.clone());
    ensure!(
        rv == patched.metadata.resource_version,
        "the status-only version was sent: {rv:?}"
    );

    // Moved to another node: deleted here (with its model, which nothing here uses now).
    let moved = Patch::Merge(json!({ "spec": { "nodeName": "elsewhere" } }));
    devices.patch("t1", &PatchParams::default(), &moved).await?;
    let deleted = h
        .expect(node, "device delete", |m| {
            is(m, Operation::Delete, &dev_path("t1"))
        })
        .await?;
    ensure!(deleted.header.as_ref().map(|h| h.uid.as_str()) == Some(t1_uid.as_str()));
    h.expect(node, "model delete", |m| {
        is(m, Operation::Delete, &model_path("thermo"))
    })
    .await?;

    // Deleted: deleted on its node; its DeviceStatus goes with it (owner reference).
    devices.delete("lost", &DeleteParams::default()).await?;
    h.expect(node, "device delete", |m| {
        is(m, Operation::Delete, &dev_path("lost"))
    })
    .await?;
    devices.delete("t1", &DeleteParams::default()).await?;
    wait_for("the DeviceStatus to be collected", WAIT, || {
        let statuses = statuses.clone();
        async move { Ok(statuses.get_opt("t1").await?.is_none().then_some(())) }
    })
    .await?;
    Ok(())
}

/// Status reports of `t1` (uid `uid`) from `node`: written into the DeviceStatus, replaced by
/// newer ones; stale uids and unknown devices acked and dropped; other nodes refused.
async fn reports(
    h: &mut Hub,
    statuses: &Api<DynamicObject>,
    ns: &str,
    node: &str,
    uid: &str,
) -> anyhow::Result<()> {
    let a = h
        .ask(node, report(node, ns, "t1", uid, &twins("23", "online")))
        .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    let status = statuses.get("t1").await?;
    let owner = status
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .next()
        .context("no owner")?;
    ensure!(owner.kind == "Device" && owner.name == "t1" && owner.uid == uid);
    ensure!(owner.controller == Some(true));
    let written = &status.data["status"];
    ensure!(
        written["twins"][0]["reported"]["value"] == "23",
        "{written}"
    );
    ensure!(
        written["twins"][0]["observedDesired"]["value"] == "20",
        "{written}"
    );
    ensure!(written["state"] == "online" && written["lastOnlineTime"] == "2026-01-01T00:00:00Z");

    // A newer report replaces the twins and the state.
    let a = h
        .ask(node, report(node, ns, "t1", uid, &twins("24", "offline")))
        .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    let written = statuses.get("t1").await?.data["status"].clone();
    ensure!(written["twins"][0]["reported"]["value"] == "24" && written["state"] == "offline");

    // A report made for an earlier Device of that name: acked, nothing written.
    let a = h
        .ask(
            node,
            report(node, ns, "t1", "old-uid", &twins("1", "online")),
        )
        .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    // A report for a Device that does not exist: acked, nothing written.
    let a = h
        .ask(node, report(node, ns, "ghost", "g", &twins("1", "online")))
        .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    ensure!(statuses.get_opt("ghost").await?.is_none());
    // Another node may not report for t1.
    let other = format!("{node}-other");
    let a = h
        .ask(&other, report(&other, ns, "t1", uid, &twins("2", "online")))
        .await?;
    ensure!(a.operation()? == Operation::Error, "{}", reason(&a));
    ensure!(reason(&a).contains("may not write"), "{}", reason(&a));
    let written = statuses.get("t1").await?.data["status"].clone();
    ensure!(
        written["twins"][0]["reported"]["value"] == "24",
        "{written}"
    );
    Ok(())
}
