//! Issue 31, weakness 5: one node cannot exhaust cloudhub. A node with a valid certificate
//! sends 1,000 reports of 4 MiB (4 GB) as fast as its session takes them, on the real
//! cloudhub and edgecontroller; meanwhile a pod created for another edge node (a real
//! edgecore) must reach it and run, and cloudhub's peak resident memory must stay under the
//! 512 MiB limit its Deployment sets. The node's upstream byte budget (`nodeUpstreamBytes`)
//! and the controllers' queue budgets answer what does not fit with `error` (the edge would
//! keep those in its outbox); before them, cloudhub queued 4,096 frames of up to 4 MiB per
//! controller (services/cloudhub/tests/limits.rs counts that in-process).

// The test's own sender and reader tasks end with it.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tokio_stream::wrappers::ReceiverStream;
use verge_core::{Group, Operation};
use verge_e2e::{Cloud, Edge, create_namespace, sleeper_pod, wait_running};
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{EdgeFrame, EdgeHello, cloud_frame, edge_frame};
use verge_proto::{Message, MessageExt as _};

/// Reports the flooding node sends.
const REPORTS: usize = 1_000;
/// Each report's content: 4 MiB less room for the envelope (cloudhub's `maxFrameBytes` is
/// 4 MiB).
const REPORT_BYTES: usize = 4 * 1024 * 1024 - 4096;
/// The memory limit of cloudhub's Deployment (deploy/cloud/cloudhub.yaml).
const CLOUDHUB_LIMIT_KIB: u64 = 512 * 1024;

/// `field` of cloudhub's `/proc/<pid>/status` in KiB.
fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    verge_testkit::process::status_kib(pid, field)
        .with_context(|| format!("no {field} for pid {pid}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_large_reports_stays_within_cloudhubs_memory() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let pid = std::process::id();

    // Another edge node, a real edgecore.
    let other = format!("e2e-flood-other-{pid}");
    let mut edge = Edge::new(&other, &cloud)?;
    edge.start()?;
    verge_testkit::wait::wait_node_ready(&client, &other, Duration::from_secs(30)).await?;
    create_namespace(&client, &other).await?;

    // The flooding node: its Node, and a certificate from the Verge CA.
    let flood = format!("e2e-flood-{pid}");
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": flood, "labels": { verge_core::EDGE_NODE_LABEL: "" } },
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    let result = flood_and_deliver(&cloud, &client, &flood, &other).await;
    let _ = nodes.delete(&flood, &DeleteParams::default()).await;
    result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(30),
            edge.logs(30)
        )
    })
}

async fn flood_and_deliver(
    cloud: &Cloud,
    client: &kube::Client,
    flood: &str,
    other: &str,
) -> anyhow::Result<()> {
    let ca = verge_testkit::trust::verge_ca(client).await?;
    let tls = verge_testkit::trust::node_client_config(&ca, flood)?;
    let endpoint = verge_proto::transport::endpoint(&cloud.edge_url)?;
    let channel = verge_proto::transport::connect_tls(endpoint, tls, None).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let hello = EdgeFrame {
        frame: Some(edge_frame::Frame::Hello(EdgeHello {
            node_name: flood.to_owned(),
            ..EdgeHello::default()
        })),
    };
    tx.send(hello).await?;
    let mut stream = EdgeHubClient::new(channel)
        .max_decoding_message_size(8 << 20)
        .max_encoding_message_size(8 << 20)
        .connect(ReceiverStream::new(rx))
        .await?
        .into_inner();
    stream.message().await?.context("no welcome")?;
    // What cloudhub answers: `error` for what did not fit (or what edgecontroller refused).
    let answers = tokio::spawn(async move {
        let mut errors = 0usize;
        while let Ok(Some(frame)) = stream.message().await {
            if let Some(cloud_frame::Frame::Message(m)) = frame.frame
                && m.operation() == Ok(Operation::Error)
            {
                errors += 1;
            }
        }
        errors
    });
    let hub = cloud.cloudhub.pid();
    let before = status_kib(hub, "VmHWM")?;
    let content = Arc::new(vec![b'x'; REPORT_BYTES]);
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        for i in 0..REPORTS {
            let report = Message::build(
                format!("flood-{i}"),
                "edged",
                Group::Resource,
                Operation::Update,
                format!("default/podstatus/flood-{i}"),
                content.as_ref().clone(),
            );
            let frame = EdgeFrame {
                frame: Some(edge_frame::Frame::Message(report)),
            };
            if tx.send(frame).await.is_err() {
                return i;
            }
        }
        REPORTS
    });

    // Meanwhile a pod for the other node reaches it and runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), other);
    let created = Instant::now();
    pods.create(
        &PostParams::default(),
        &sleeper_pod(other, "during-flood", other)?,
    )
    .await?;
    wait_running(&pods, "during-flood", Duration::from_secs(90)).await?;
    let pod_running = created.elapsed();

    let sent = tokio::time::timeout(Duration::from_secs(600), sender)
        .await
        .context("the flood did not end within 10 min")??;
    let flood_took = started.elapsed();
    let peak = status_kib(hub, "VmHWM")?;
    eprintln!(
        "flood: {sent} reports of {REPORT_BYTES} B sent in {flood_took:.1?}; the other node's \
         pod Running {pod_running:.1?} after its creation; cloudhub peak RSS {} MiB (before \
         the flood {} MiB)",
        peak / 1024,
        before / 1024
    );
    ensure!(sent == REPORTS, "the session ended after {sent} reports");
    ensure!(
        peak < CLOUDHUB_LIMIT_KIB,
        "cloudhub's peak RSS {peak} KiB is over its 512 MiB limit"
    );
    let errors = tokio::time::timeout(Duration::from_secs(5), answers)
        .await
        .map_or(0, |r| r.unwrap_or(0));
    eprintln!("flood: {errors} error answers seen so far");
    Ok(())
}
