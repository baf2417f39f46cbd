//! Component tests of devicetwin and the DMI: edgehub, metamanager and devicetwin run
//! in-process against the in-test fake cloudhub; a tonic client plays the mapper over the
//! real DMI unix socket (sending the socket path as a percent-encoded `:authority`, as
//! grpc-go mappers do), and a fake mapper serves `DeviceMapperService` on its own socket.
//!
//! Covered: MapperRegister with and without data, CreateDeviceModel before RegisterDevice
//! (retried until the mapper's server is up), UpdateDevice on a new desired value,
//! RemoveDevice/RemoveDeviceModel on delete, reports reaching the cloud as `devicestatus`,
//! validation and rate limiting, offline coalescing, and mappers remembered across a restart.

mod common;
mod dmi_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use verge_core::{Group, Operation};
use verge_device_api::StatusReport;
use verge_edgecore::{
    Config, DeviceTwin, DeviceTwinHandle, EdgeHub, EdgeHubHandle, MetaManager, MetaStore,
};
use verge_proto::{Message, MessageExt};

use common::{SessionCtl, answer_to, is, next_hello, next_msg, start_fake};
use dmi_common::{
    Call, dmi_client, forged_channel, go_authority, next_call, register_request, report,
    serve_mapper,
};

/// edgehub + metamanager + devicetwin of one edge.
struct Edge {
    store: MetaStore,
    hub: EdgeHubHandle,
    twins: DeviceTwinHandle,
    socket: PathBuf,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<verge_edgecore::Result<()>>>,
}

impl Edge {
    async fn start(url: String, dir: &Path, tweak: impl FnOnce(&mut Config)) -> Result<Self> {
        let mut config = common::config(url, dir);
        config.device_twin.dmi_socket = dir.join("dmi.sock");
        config.device_twin.mapper_retry_backoff = Duration::from_millis(100);
        config.device_twin.mapper_retry_max_backoff = Duration::from_millis(400);
        tweak(&mut config);
        let config = Arc::new(config);
        let store = MetaStore::open(&config.store_path())?;
        let (down_tx, down_rx) = mpsc::channel(64);
        let (hub, handle) = EdgeHub::new(Arc::clone(&config), store.clone(), down_tx);
        let meta = MetaManager::new(store.clone(), down_rx, handle.clone());
        let (twin, twins) = DeviceTwin::new(
            config.device_twin.clone(),
            store.clone(),
            handle.clone(),
            meta.subscribe(),
        );
        let stop = CancellationToken::new();
        let tasks = vec![
            tokio::spawn(hub.run(stop.clone())),
            tokio::spawn(meta.run(stop.clone())),
            tokio::spawn(twin.run(stop.clone())),
        ];
        let socket = config.device_twin.dmi_socket.clone();
        tokio::time::timeout(dmi_common::STEP, async {
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

    async fn stop(self) -> Result<()> {
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

fn model_json() -> Value {
    json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": {"name": "thermo-model", "namespace": "ns", "uid": "m-uid", "resourceVersion": "1"},
        "spec": {"protocol": "virtual", "properties": [
            {"name": "temperature", "type": "INT", "accessMode": "ReadOnly"},
            {"name": "setpoint", "type": "INT", "accessMode": "ReadWrite"}
        ]}
    })
}

fn device_json(rv: &str, setpoint: &str) -> Value {
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
async fn down(
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

#[tokio::test]
async fn a_mapper_gets_its_devices_and_its_reports_reach_the_cloud() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url, dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    down(
        &session,
        &mut events,
        "m1",
        Operation::Update,
        "ns/devicemodel/thermo-model",
        Some(("m-uid", "1", model_json())),
    )
    .await?;
    down(
        &session,
        &mut events,
        "d1",
        Operation::Update,
        "ns/device/thermo",
        Some(("d-uid", "1", device_json("1", "21"))),
    )
    .await?;

    // A Go mapper registers (withData) over the DMI socket, sending the path as :authority.
    let mapper_socket = dir.path().join("virtual.sock");
    let mut client = dmi_client(&edge.socket, go_authority(&edge.socket));
    let answer = client
        .mapper_register(register_request("virtual", &mapper_socket, true))
        .await
        .context("MapperRegister with a socket-path authority")?
        .into_inner();
    ensure!(
        answer.device_list.len() == 1 && answer.model_list.len() == 1,
        "{answer:?}"
    );
    let device = &answer.device_list[0];
    let spec = device.spec.as_ref().context("spec")?;
    ensure!(device.namespace == "ns" && spec.device_model_reference == "thermo-model");
    ensure!(
        spec.properties[1]
            .desired
            .as_ref()
            .map(|d| d.value.as_str())
            == Some("21")
    );
    let data = &spec
        .protocol
        .as_ref()
        .context("protocol")?
        .config_data
        .as_ref()
        .context("data")?
        .data;
    ensure!(
        data["slave"]
            .type_url
            .ends_with("google.protobuf.FloatValue")
    );

    // The mapper starts its server after registering; it already holds the device.
    let stop_mapper = CancellationToken::new();
    let mut calls = serve_mapper(&mapper_socket, stop_mapper.clone())?;

    // A report reaches the cloud as the device's status, after it was committed.
    client
        .report_device_status(report("thermo", "temperature", "23"))
        .await?;
    let status = next_msg(
        &mut events,
        "devicestatus",
        is(Operation::Update, "ns/devicestatus/thermo"),
    )
    .await?;
    ensure!(
        status.header.as_ref().is_some_and(|h| h.uid == "d-uid"),
        "header uid is the Device's"
    );
    let body: StatusReport = serde_json::from_slice(&status.content)?;
    ensure!(
        body.twins[0].reported.as_ref().map(|r| r.value.as_str()) == Some("23"),
        "{body:?}"
    );
    let ack = Message::reply(
        "ack-1",
        status.id(),
        "devicecontroller",
        Group::Device,
        Operation::Ack,
        status.resource(),
        Vec::new(),
    );
    session.send(ack).await?;
    let twins = edge.twins.get("ns", "thermo").await?;
    ensure!(
        twins.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.value.as_str())
            == Some("23")
    );

    // Bad reports are refused by name, and change nothing.
    let err = client
        .report_device_status(report("thermo", "humidity", "1"))
        .await
        .expect_err("unknown property");
    ensure!(err.code() == tonic::Code::InvalidArgument, "{err:?}");
    ensure!(
        err.message().contains("has no property \"humidity\""),
        "{}",
        err.message()
    );
    let err = client
        .report_device_status(report("ghost", "temperature", "1"))
        .await
        .expect_err("unknown device");
    ensure!(
        err.code() == tonic::Code::InvalidArgument && err.message().contains("ns/ghost"),
        "{err:?}"
    );
    let err = client
        .mapper_register(register_request("", &mapper_socket, false))
        .await
        .expect_err("no protocol");
    ensure!(
        err.message().contains("mapper.protocol is empty"),
        "{}",
        err.message()
    );

    // A new desired value reaches the mapper as UpdateDevice.
    down(
        &session,
        &mut events,
        "d2",
        Operation::Update,
        "ns/device/thermo",
        Some(("d-uid", "2", device_json("2", "25"))),
    )
    .await?;
    let Call::Update(updated) = next_call(&mut calls).await? else {
        anyhow::bail!("expected UpdateDevice")
    };
    let desired = updated
        .spec
        .as_ref()
        .and_then(|s| s.properties[1].desired.as_ref());
    ensure!(
        desired.map(|d| d.value.as_str()) == Some("25"),
        "{updated:?}"
    );
    ensure!(
        updated
            .status
            .as_ref()
            .is_some_and(|s| s.twins.iter().any(|t| t.property_name == "temperature")),
        "current twins travel with the device"
    );

    // Deleting the Device removes it, then its model, from the mapper.
    down(
        &session,
        &mut events,
        "d3",
        Operation::Delete,
        "ns/device/thermo",
        None,
    )
    .await?;
    ensure!(next_call(&mut calls).await? == Call::Remove("ns/thermo".into()));
    ensure!(next_call(&mut calls).await? == Call::RemoveModel("ns/thermo-model".into()));
    ensure!(
        edge.twins.get("ns", "thermo").await.is_err(),
        "the twin is gone"
    );

    stop_mapper.cancel();
    edge.stop().await
}

#[tokio::test]
async fn without_data_the_mapper_is_called_once_its_server_is_up() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url.clone(), dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    down(
        &session,
        &mut events,
        "m1",
        Operation::Update,
        "ns/devicemodel/thermo-model",
        Some(("m-uid", "1", model_json())),
    )
    .await?;
    down(
        &session,
        &mut events,
        "d1",
        Operation::Update,
        "ns/device/thermo",
        Some(("d-uid", "1", device_json("1", "21"))),
    )
    .await?;

    let mapper_socket = dir.path().join("virtual.sock");
    let mut client = dmi_client(&edge.socket, go_authority(&edge.socket));
    let answer = client
        .mapper_register(register_request("virtual", &mapper_socket, false))
        .await?
        .into_inner();
    ensure!(answer.device_list.is_empty(), "no data asked for");
    // The first calls find no socket; they are retried until the server is up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stop_mapper = CancellationToken::new();
    let mut calls = serve_mapper(&mapper_socket, stop_mapper.clone())?;
    let first = next_call(&mut calls).await?;
    ensure!(
        matches!(first, Call::CreateModel(ref m) if m.name == "thermo-model"),
        "{first:?}"
    );
    let second = next_call(&mut calls).await?;
    ensure!(
        matches!(second, Call::Register(ref d) if d.name == "thermo"),
        "{second:?}"
    );

    // After a restart edgecore still knows the mapper: a new Device is handed to it
    // without a new registration.
    edge.stop().await?;
    let edge = Edge::start(url, dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    let mut other = device_json("1", "19");
    other["metadata"]["name"] = json!("thermo-2");
    other["metadata"]["uid"] = json!("d2-uid");
    down(
        &session,
        &mut events,
        "d2",
        Operation::Update,
        "ns/device/thermo-2",
        Some(("d2-uid", "1", other)),
    )
    .await?;
    let call = next_call(&mut calls).await?;
    ensure!(
        matches!(call, Call::Register(ref d) if d.name == "thermo-2"),
        "{call:?}"
    );
    stop_mapper.cancel();
    edge.stop().await
}

#[tokio::test]
async fn offline_reports_coalesce_and_the_newest_reaches_the_cloud() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url, dir.path(), |c| {
        c.device_twin.mapper_request_rate = 5;
        c.device_twin.mapper_request_burst = 5;
        // Offline for at least 2 s after the cut.
        c.edge_hub.reconnect_initial_backoff = Duration::from_secs(4);
        c.edge_hub.reconnect_max_backoff = Duration::from_secs(4);
    })
    .await?;
    let (_, session) = next_hello(&mut events).await?;
    down(
        &session,
        &mut events,
        "m1",
        Operation::Update,
        "ns/devicemodel/thermo-model",
        Some(("m-uid", "1", model_json())),
    )
    .await?;
    down(
        &session,
        &mut events,
        "d1",
        Operation::Update,
        "ns/device/thermo",
        Some(("d-uid", "1", device_json("1", "21"))),
    )
    .await?;
    let mut client = dmi_client(&edge.socket, go_authority(&edge.socket));
    client
        .mapper_register(register_request(
            "virtual",
            &dir.path().join("v.sock"),
            false,
        ))
        .await?;

    // The link is cut: reports are committed at the edge and wait, one per device.
    session.kill.cancel();
    tokio::time::timeout(dmi_common::STEP, async {
        while edge.hub.connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .context("the session never ended")?;
    for v in ["1", "2", "3"] {
        client
            .report_device_status(report("thermo", "temperature", v))
            .await?;
    }
    ensure!(edge.store.outbox_len()? == 1, "one coalesced status");
    // The mapper exceeds its budget (5/s): refused with RESOURCE_EXHAUSTED.
    let mut limited = None;
    for _ in 0..5 {
        if let Err(e) = client
            .report_device_status(report("thermo", "temperature", "9"))
            .await
        {
            limited = Some(e);
            break;
        }
    }
    let limited = limited.context("the rate limit never applied")?;
    ensure!(
        limited.code() == tonic::Code::ResourceExhausted,
        "{limited:?}"
    );
    ensure!(
        limited.message().contains("slow down"),
        "{}",
        limited.message()
    );

    // Reconnected, the newest value arrives.
    let (_, _session) = next_hello(&mut events).await?;
    let status = next_msg(
        &mut events,
        "devicestatus",
        is(Operation::Update, "ns/devicestatus/thermo"),
    )
    .await?;
    let body: StatusReport = serde_json::from_slice(&status.content)?;
    let newest = body.twins[0].reported.as_ref().map(|r| r.value.clone());
    ensure!(
        newest.as_deref() == Some("9") || newest.as_deref() == Some("3"),
        "{body:?}"
    );
    let twins = edge.twins.get("ns", "thermo").await?;
    ensure!(
        twins.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| &r.value)
            == newest.as_ref()
    );
    edge.stop().await
}

#[tokio::test]
async fn a_plain_tonic_server_would_refuse_the_go_authority() -> Result<()> {
    // The control for the tests above: the forged `:authority` really is what h2 refuses,
    // so only edgecore's relay (verge_runtime::unix_grpc) lets Go mappers in.
    use verge_proto::dmi::v1beta1 as dmi;
    use verge_proto::dmi::v1beta1::device_mapper_service_client::DeviceMapperServiceClient;
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("plain.sock");
    let stop = CancellationToken::new();
    let mut calls = serve_mapper(&socket, stop.clone())?;
    let request = || dmi::RemoveDeviceRequest {
        device_name: "d".into(),
        device_namespace: "ns".into(),
    };
    let mut plain = DeviceMapperServiceClient::new(forged_channel(&socket, "localhost".into()));
    plain.remove_device(request()).await?;
    ensure!(next_call(&mut calls).await? == Call::Remove("ns/d".into()));
    let mut go = DeviceMapperServiceClient::new(forged_channel(&socket, go_authority(&socket)));
    let refused = go
        .remove_device(request())
        .await
        .expect_err("h2 refuses the authority");
    ensure!(refused.code() == tonic::Code::Internal, "{refused:?}");
    ensure!(
        format!("{refused:?}").contains("PROTOCOL_ERROR"),
        "{refused:?}"
    );
    stop.cancel();
    Ok(())
}
