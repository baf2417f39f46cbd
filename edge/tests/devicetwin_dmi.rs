//! Component tests of devicetwin and the DMI: edgehub, metamanager and devicetwin run
//! in-process against the in-test fake cloudhub; a tonic client plays the mapper over the
//! real DMI unix socket (sending the socket path as a percent-encoded `:authority`, as
//! grpc-go mappers do), and a fake mapper serves `DeviceMapperService` on its own socket.
//!
//! Here: MapperRegister with data, reports reaching the cloud as `devicestatus`, validation,
//! UpdateDevice on a new desired value, RemoveDevice/RemoveDeviceModel on delete; and the
//! control showing that the Go `:authority` needs edgecore's relay.

mod common;
mod dmi_common;

use anyhow::{Context as _, Result, ensure};
use tokio_util::sync::CancellationToken;
use verge_core::{Group, Operation};
use verge_device_api::StatusReport;
use verge_proto::{Message, MessageExt};

use common::{is, next_hello, next_msg, start_fake};
use dmi_common::edge::{Edge, device_json, down, send_thermometer};
use dmi_common::{
    Call, dmi_client, forged_channel, go_authority, next_call, register_request, report,
    serve_mapper,
};

#[tokio::test]
async fn a_mapper_gets_its_devices_and_its_reports_reach_the_cloud() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url, dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    send_thermometer(&session, &mut events).await?;

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

/// The environment variable that makes [`second_process_registers`] act: the DMI socket to
/// register on.
const SECOND_MAPPER_DMI: &str = "VERGE_TEST_SECOND_MAPPER_DMI";

/// Issue 31, weakness 7: mappers have an identity. While the process that registered a
/// protocol runs, a second process registering that protocol is refused and cannot report
/// for its devices; a mapper socket outside the DMI socket's directory is refused; the
/// first registration stays.
#[tokio::test]
async fn a_second_process_cannot_take_over_a_protocol() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url, dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    send_thermometer(&session, &mut events).await?;
    let mapper_socket = dir.path().join("virtual.sock");
    let mut client = dmi_client(&edge.socket, go_authority(&edge.socket));
    client
        .mapper_register(register_request("virtual", &mapper_socket, false))
        .await
        .context("the first registration")?;

    // This test binary, run again as a second process, registers "virtual" too (waited for
    // without blocking the runtime that serves the DMI socket).
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--exact", "second_process_registers", "--nocapture"])
        .env(SECOND_MAPPER_DMI, &edge.socket)
        .output()
        .await?;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        said.contains("registration: PermissionDenied")
            && said.contains("report: PermissionDenied"),
        "the second process was not refused: {said}"
    );

    // A socket outside the DMI socket's directory is refused, even for the owner.
    let elsewhere = tempfile::tempdir()?;
    let refused = client
        .mapper_register(register_request(
            "virtual",
            &elsewhere.path().join("virtual.sock"),
            false,
        ))
        .await
        .expect_err("a socket in another directory");
    ensure!(
        refused.code() == tonic::Code::InvalidArgument,
        "{refused:?}"
    );
    // The owner still reports.
    client
        .report_device_status(report("thermo", "temperature", "23"))
        .await
        .context("the owner's report")?;
    edge.stop().await
}

/// The second process of [`a_second_process_cannot_take_over_a_protocol`]; does nothing
/// unless [`SECOND_MAPPER_DMI`] is set. Prints the codes of its registration and report.
#[tokio::test]
async fn second_process_registers() -> Result<()> {
    let Some(dmi_socket) = std::env::var_os(SECOND_MAPPER_DMI) else {
        return Ok(());
    };
    let dmi_socket = std::path::PathBuf::from(dmi_socket);
    let mapper_socket = dmi_socket.with_file_name("virtual.sock");
    let mut client = dmi_client(&dmi_socket, go_authority(&dmi_socket));
    let code = |r: std::result::Result<_, tonic::Status>| match r {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    let registered = code(
        client
            .mapper_register(register_request("virtual", &mapper_socket, true))
            .await
            .map(|_| ()),
    );
    println!("registration: {registered:?}");
    let reported = code(
        client
            .report_device_status(report("thermo", "temperature", "99"))
            .await
            .map(|_| ()),
    );
    println!("report: {reported:?}");
    Ok(())
}
