//! devicetwin while the cloud is unreachable: reported values are committed at the edge,
//! one coalesced `devicestatus` snapshot per device waits in the outbox and the newest
//! reaches the cloud after reconnect; a mapper over its request budget gets
//! RESOURCE_EXHAUSTED.

mod common;
mod dmi_common;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use verge_core::Operation;
use verge_device_api::StatusReport;

use common::{is, next_hello, next_msg, start_fake};
use dmi_common::edge::{Edge, send_thermometer};
use dmi_common::{dmi_client, go_authority, register_request, report};

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
    send_thermometer(&session, &mut events).await?;
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
