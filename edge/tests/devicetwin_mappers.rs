//! devicetwin calling mappers: without `withData` the mapper gets CreateDeviceModel, then
//! RegisterDevice, retried until its server is up; after an edgecore restart the mapper is
//! still known (redb) and gets new Devices without registering again (calls are at least
//! once: one made just before the stop may be repeated).

mod common;
mod dmi_common;

use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use verge_core::Operation;

use common::{next_hello, start_fake};
use dmi_common::edge::{Edge, device_json, down, send_thermometer};
use dmi_common::{Call, dmi_client, go_authority, next_call, register_request, serve_mapper};

#[tokio::test]
async fn without_data_the_mapper_is_called_once_its_server_is_up() -> Result<()> {
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edge = Edge::start(url.clone(), dir.path(), |_| {}).await?;
    let (_, session) = next_hello(&mut events).await?;
    send_thermometer(&session, &mut events).await?;

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
    // Calls are at least once: one whose answer edgecore had not recorded when it stopped
    // is made again (the mapper treats it as a no-op); nothing else comes first.
    loop {
        match next_call(&mut calls).await? {
            Call::Register(d) if d.name == "thermo-2" => break,
            Call::Register(d) if d.name == "thermo" => {}
            Call::CreateModel(m) if m.name == "thermo-model" => {}
            other => anyhow::bail!("unexpected call after the restart: {other:?}"),
        }
    }
    stop_mapper.cancel();
    edge.stop().await
}
