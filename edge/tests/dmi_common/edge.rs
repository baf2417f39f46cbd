//! One edge for the devicetwin tests: edgehub, metamanager and devicetwin in-process
//! against the fake cloudhub, and the Device/DeviceModel objects the cloud sends down.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use verge_core::{Group, Operation};
use verge_edgecore::{
    Config, DeviceTwin, DeviceTwinHandle, EdgeHub, EdgeHubHandle, MetaManager, MetaStore,
};
use verge_proto::Message;

use crate::common::{self, SessionCtl, answer_to, next_msg};

/// edgehub + metamanager + devicetwin of one edge.
pub struct Edge {
    pub store: MetaStore,
    pub hub: EdgeHubHandle,
    pub twins: DeviceTwinHandle,
    pub socket: PathBuf,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<verge_edgecore::Result<()>>>,
}

impl Edge {
    pub async fn start(url: String, dir: &Path, tweak: impl FnOnce(&mut Config)) -> Result<Self> {
        let mut config = common::config(url, dir);
        config.device_twin.dmi_socket = dir.join("dmi.sock");
        config.device_twin.mapper_retry_backoff = Duration::from_millis(100);
        config.device_twin.mapper_retry_max_backoff = Duration::from_millis(400);
        tweak(&mut config);
        let config = Arc::new(config);
        let store = MetaStore::open(&config.store_path())?;
        let (down_tx, down_rx) = mpsc::channel(64);
        let (hub, handle) = EdgeHub::new(Arc::new(config.hub_settings()), store.clone(), down_tx);
        let meta = MetaManager::new(store.clone(), down_rx, handle.clone());
        let (twin, twins) = DeviceTwin::new(
            config.device_twin.clone(),
            store.clone(),
            handle.clone(),
            meta.subscribe(),
        );
        let stop = CancellationToken::new();
        let tasks = vec![
            tokio::spawn({
                let stop = stop.clone();
                async move { Ok::<_, verge_edgecore::Error>(hub.run(stop).await?) }
            }),
            tokio::spawn({
                let stop = stop.clone();
                async move { Ok::<_, verge_edgecore::Error>(meta.run(stop).await?) }
            }),
            tokio::spawn({
                let stop = stop.clone();
                async move { Ok::<_, verge_edgecore::Error>(twin.run(stop).await?) }
            }),
        ];
        let socket = config.device_twin.dmi_socket.clone();
        tokio::time::timeout(super::STEP, async {
            while !socket.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .context("DMI socket never appeared")?;
        Ok(Self {
            store,
            hub: handle,
            twins,
            socket,
            stop,
            tasks,
        })
    }

    pub async fn stop(self) -> Result<()> {
        self.stop.cancel();
        for task in self.tasks {
            task.await??;
        }
        ensure!(
            !self.socket.exists(),
            "the DMI socket is removed on shutdown"
        );
        Ok(())
    }
}

pub fn model_json() -> Value {
    json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": {"name": "thermo-model", "namespace": "ns", "uid": "m-uid", "resourceVersion": "1"},
        "spec": {"protocol": "virtual", "properties": [
            {"name": "temperature", "type": "INT", "accessMode": "ReadOnly"},
            {"name": "setpoint", "type": "INT", "accessMode": "ReadWrite"}
        ]}
    })
}

pub fn device_json(rv: &str, setpoint: &str) -> Value {
    json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": {"name": "thermo", "namespace": "ns", "uid": "d-uid", "resourceVersion": rv},
        "spec": {
            "deviceModelRef": {"name": "thermo-model"},
            "nodeName": "edge-test",
            "protocol": {"protocolName": "virtual", "configData": {"deviceID": "t-1", "slave": 1}},
            "properties": [
                {"name": "temperature", "reportToCloud": true, "collectCycle": 1000,
                 "visitors": {"protocolName": "virtual", "configData": {"dataType": "int"}}},
                {"name": "setpoint", "reportToCloud": true, "desired": {"value": setpoint},
                 "visitors": {"protocolName": "virtual", "configData": {"dataType": "int"}}}
            ]
        }
    })
}

/// Sends an object message down and waits for metamanager's ack.
pub async fn down(
    session: &SessionCtl,
    events: &mut mpsc::UnboundedReceiver<common::Event>,
    id: &'static str,
    op: Operation,
    path: &str,
    object: Option<(&str, &str, Value)>,
) -> Result<()> {
    let (uid, rv, body) = match object {
        Some((uid, rv, value)) => (uid, rv, serde_json::to_vec(&value)?),
        None => ("d-uid", "", Vec::new()),
    };
    let msg =
        Message::build(id, "devicecontroller", Group::Device, op, path, body).with_object(uid, rv);
    session.send(msg).await?;
    next_msg(events, id, answer_to(Operation::Ack, id)).await?;
    Ok(())
}

/// Sends the thermometer's model (`ns/devicemodel/thermo-model`, uid `m-uid`) and then the
/// Device (`ns/device/thermo`, uid `d-uid`, setpoint 21) down, each acked by metamanager.
pub async fn send_thermometer(
    session: &SessionCtl,
    events: &mut mpsc::UnboundedReceiver<common::Event>,
) -> Result<()> {
    let model = Some(("m-uid", "1", model_json()));
    down(
        session,
        events,
        "m1",
        Operation::Update,
        "ns/devicemodel/thermo-model",
        model,
    )
    .await?;
    let device = Some(("d-uid", "1", device_json("1", "21")));
    down(
        session,
        events,
        "d1",
        Operation::Update,
        "ns/device/thermo",
        device,
    )
    .await
}
