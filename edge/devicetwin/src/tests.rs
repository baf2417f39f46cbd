//! The twin writer and its handle against a real store and a real edgehub outbox.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use verge_core::Envelope;
use verge_device_api::{StatusReport, Twin, TwinProperty};

use super::devices::{DeviceCache, DeviceId, StoredDevice, StoredModel};
use super::handle::DeviceTwinHandle;
use super::writer::TwinWriter;
use verge_edge_store::{MetaStore, StoredObject};
use verge_edgehub::EdgeHub;

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) store: MetaStore,
    devices: DeviceCache,
    pub(super) twins: DeviceTwinHandle,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn thermo(uid: &str, properties: serde_json::Value) -> StoredDevice {
    let object = StoredObject {
        uid: uid.into(),
        resource_version: "1".into(),
        content: serde_json::to_vec(&json!({
            "metadata": {"name": "thermo", "namespace": "ns", "uid": uid},
            "spec": {"deviceModelRef": {"name": "thermo-model"},
                "protocol": {"protocolName": "virtual"}, "properties": properties}
        }))
        .expect("json"),
    };
    StoredDevice::parse(&DeviceId::new("ns", "thermo"), &object).expect("device")
}

fn properties() -> serde_json::Value {
    json!([
        {"name": "temperature", "reportToCloud": true},
        {"name": "setpoint", "reportToCloud": true, "desired": {"value": "21"}},
        {"name": "local"}
    ])
}

/// A writer over a fresh store whose reports go to a real (not running) edgehub's outbox.
pub(super) async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("open");
    let (down, _) = mpsc::channel(1);
    let (_hub, hub) = EdgeHub::new(Arc::new(hub_settings()), store.clone(), down);
    let devices = DeviceCache::default();
    devices.insert_device(thermo("u1", properties()));
    let model = StoredObject {
        uid: "m".into(),
        resource_version: "1".into(),
        content: serde_json::to_vec(&json!({"spec": {"properties": [
            {"name": "temperature", "type": "INT"}
        ]}}))
        .expect("json"),
    };
    let model_id = DeviceId::new("ns", "thermo-model");
    devices.insert_model(
        model_id.clone(),
        StoredModel::parse(&model_id, &model).expect("model"),
    );
    let (ops_tx, ops) = mpsc::channel(64);
    let changes = broadcast::channel(16).0;
    let twins = DeviceTwinHandle::new(ops_tx, changes.clone());
    let writer =
        TwinWriter::new(store.clone(), hub, devices.clone(), ops, changes).expect("writer");
    let stop = CancellationToken::new();
    let task = tokio::spawn(writer.run(stop.clone()));
    Fixture {
        _dir: dir,
        store,
        devices,
        twins,
        stop,
        task,
    }
}

pub(super) fn twin(name: &str, value: &str) -> Twin {
    Twin {
        property_name: name.into(),
        reported: Some(TwinProperty::new(value)),
        observed_desired: None,
    }
}

/// The `devicestatus` report of ns/thermo waiting in the outbox.
pub(super) fn pending(store: &MetaStore) -> Option<(Envelope, StatusReport)> {
    let entry = store.outbox_get("devicestatus/ns/thermo").expect("read")?;
    let message = verge_edgehub::outbox::message(&entry).expect("decode");
    let body = serde_json::from_slice(&message.body).expect("body");
    Some((message, body))
}

#[tokio::test]
async fn reports_commit_with_one_coalesced_status_per_device() {
    let f = fixture().await;
    let mut changes = f.twins.subscribe();
    let doc = f
        .twins
        .report("ns", "thermo", vec![twin("temperature", "20")])
        .await
        .expect("report");
    assert_eq!(doc.last.twins["temperature"].reported, None);
    assert_eq!(
        doc.current.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.value.as_str()),
        Some("20")
    );
    assert_eq!(doc.delta().keys().collect::<Vec<_>>(), ["setpoint"]);
    assert_eq!(changes.recv().await.expect("change").updated.len(), 1);
    let (message, body) = pending(&f.store).expect("reported");
    assert_eq!(message.path(), "ns/devicestatus/thermo");
    assert_eq!(message.key().map(|k| k.name.as_str()), Some("thermo"));
    assert_eq!(body.twins.len(), 1);

    // Offline: more reports replace the waiting snapshot; the newest value per property
    // survives.
    for v in ["21", "22", "23"] {
        f.twins
            .report("ns", "thermo", vec![twin("temperature", v)])
            .await
            .expect("report");
    }
    f.twins
        .report("ns", "thermo", vec![twin("setpoint", "21")])
        .await
        .expect("report");
    assert_eq!(f.store.outbox_len().expect("len"), 1);
    let (_, body) = pending(&f.store).expect("reported");
    let values: Vec<(&str, &str)> = body
        .twins
        .iter()
        .map(|t| {
            (
                t.property_name.as_str(),
                t.reported.as_ref().map_or("", |r| r.value.as_str()),
            )
        })
        .collect();
    assert_eq!(values, [("setpoint", "21"), ("temperature", "23")]);

    // A property that stays on the edge changes no report.
    let before = f.store.outbox_get("devicestatus/ns/thermo").expect("get");
    f.twins
        .report("ns", "thermo", vec![twin("local", "x")])
        .await
        .expect("report");
    assert_eq!(
        f.store.outbox_get("devicestatus/ns/thermo").expect("get"),
        before
    );
    f.stop.cancel();
    f.task.await.expect("writer");
}

#[tokio::test]
async fn bad_reports_change_nothing() {
    let f = fixture().await;
    let err = f
        .twins
        .report(
            "ns",
            "thermo",
            vec![twin("temperature", "1"), twin("nope", "1")],
        )
        .await
        .expect_err("unknown property");
    assert!(err.to_string().contains("\"nope\""), "{err}");
    let err = f
        .twins
        .report("ns", "ghost", vec![twin("temperature", "1")])
        .await
        .expect_err("unknown device");
    assert_eq!(err.to_string(), "device ns/ghost is not known on this node");
    assert!(f.twins.set_state("ns", "thermo", "melting").await.is_err());
    assert_eq!(f.store.outbox_len().expect("len"), 0);
    let twins = f.twins.get("ns", "thermo").await.expect("get");
    assert!(twins.twins.values().all(|t| t.reported.is_none()));
    let all = f.twins.list().await.expect("list");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].twins["temperature"].kind, "INT", "the model's type");
    assert_eq!(all[0].twins["setpoint"].kind, "", "not in the model");
}

#[tokio::test]
async fn concurrent_reports_are_batched_and_all_answered() {
    let f = fixture().await;
    let calls = (0..200).map(|i| {
        let twins = f.twins.clone();
        async move {
            twins
                .report("ns", "thermo", vec![twin("temperature", &i.to_string())])
                .await
        }
    });
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
    let twins = f.twins.get("ns", "thermo").await.expect("get");
    assert_eq!(
        twins.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.value.as_str()),
        Some("199"),
        "applied in order"
    );
}

#[tokio::test]
async fn state_and_records_survive_a_restart_and_follow_the_device() {
    let f = fixture().await;
    let doc = f
        .twins
        .set_state("ns", "thermo", "OK")
        .await
        .expect("state");
    assert_eq!(doc.current.state, "ok");
    assert!(!doc.current.last_online_time.is_empty());
    let (_, body) = pending(&f.store).expect("reported");
    assert_eq!(body.state, "ok");
    f.twins
        .report("ns", "thermo", vec![twin("temperature", "5")])
        .await
        .expect("report");
    f.stop.cancel();
    f.task.await.expect("writer");

    // A new writer over the same store: the twin is still there.
    let (down, _) = mpsc::channel(1);
    let (_hub, hub) = EdgeHub::new(Arc::new(hub_settings()), f.store.clone(), down);
    let (ops_tx, ops) = mpsc::channel(8);
    let changes = broadcast::channel(4).0;
    let twins = DeviceTwinHandle::new(ops_tx, changes.clone());
    let writer =
        TwinWriter::new(f.store.clone(), hub, f.devices.clone(), ops, changes).expect("writer");
    let stop = CancellationToken::new();
    let task = tokio::spawn(writer.run(stop.clone()));
    let got = twins.get("ns", "thermo").await.expect("get");
    assert_eq!(got.state, "ok");
    assert_eq!(
        got.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.value.as_str()),
        Some("5")
    );

    // The Device is replaced (new uid): its old twin is dropped.
    f.devices.insert_device(thermo("u2", properties()));
    twins.sync(DeviceId::new("ns", "thermo")).await;
    let got = twins.get("ns", "thermo").await.expect("get");
    assert_eq!(got.state, "");
    assert!(got.twins["temperature"].reported.is_none());
    stop.cancel();
    task.await.expect("writer");
}

/// edgehub's settings for a test node (nothing connects).
fn hub_settings() -> verge_edgehub::HubSettings {
    verge_edgehub::HubSettings {
        node_name: "edge-1".to_owned(),
        data_dir: std::env::temp_dir(),
        edge_hub: verge_edgehub::EdgeHubConfig::default(),
    }
}
