//! Component test: edgecore against an in-test fake of cloudhub's `EdgeHub` service on
//! 127.0.0.1:0. Checks the hello, node registration/status/lease, downstream storage and
//! acks, stale versions, and reconnects (stream dropped; cloudhub silent).

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio_util::sync::CancellationToken;
use verge_core::{Group, Operation, ResourceKey, ResourceType};
use verge_edgecore::EdgeCore;
use verge_proto::{Message, MessageExt};

use common::{KEEPALIVE_MS, STEP, answer_to, config, is, next_hello, next_msg, start_fake};

fn pod(rv: &str) -> Message {
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web","namespace":"default","uid":"uid-web","resourceVersion":"{rv}"}}}}"#
    );
    Message::build(
        format!("down-{rv}"),
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "default/pod/web",
        json.into_bytes(),
    )
    .with_object("uid-web", rv)
}

#[tokio::test]
async fn edgecore_session_lifecycle() -> Result<()> {
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let edgecore = EdgeCore::new(config(url, dir.path()))?;
    let store = edgecore.store().clone();
    let seed = ResourceKey::new("default", ResourceType::ConfigMap, "seed");
    store.upsert_if_newer(&seed, "uid-seed", "3", b"{}")?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(edgecore.run(shutdown.clone()));

    // Hello with node name and inventory.
    let (hello, session) = next_hello(&mut events).await?;
    assert_eq!(hello.node_name, "edge-test");
    let inventory = hello.inventory.context("inventory")?.entries;
    assert!(
        inventory
            .iter()
            .any(|e| e.name == "seed" && e.r#type == "configmap" && e.resource_version == "3")
    );

    // Node registration, status and lease.
    let node = next_msg(
        &mut events,
        "node insert",
        is(Operation::Insert, "_/node/edge-test"),
    )
    .await?;
    assert_eq!(node.group(), Ok(Group::Resource));
    let node: serde_json::Value = serde_json::from_slice(&node.content)?;
    assert_eq!(
        node["metadata"]["labels"]["node-role.kubernetes.io/edge"],
        ""
    );
    // The Lease once and a full status, in either order: the status goes through the
    // outbox, the Lease does not.
    let mut status = None;
    let mut lease = None;
    while status.is_none() || lease.is_none() {
        let m = next_msg(&mut events, "node status and lease", |m| {
            m.operation() == Ok(Operation::Update)
                && matches!(
                    m.resource(),
                    "_/nodestatus/edge-test" | "kube-node-lease/lease/edge-test"
                )
        })
        .await?;
        let json: serde_json::Value = serde_json::from_slice(&m.content)?;
        if m.resource().starts_with("_/nodestatus/") {
            status = Some(json);
        } else {
            anyhow::ensure!(lease.is_none(), "a second lease in one session");
            lease = Some(json);
        }
    }
    let (status, lease) = (status.context("status")?, lease.context("lease")?);
    assert_eq!(status["capacity"]["pods"], "110");
    assert_eq!(lease["spec"]["holderIdentity"], "edge-test");
    // An unchanged status is sent again once nodeStatusReportFrequency (400 ms) passed.
    next_msg(
        &mut events,
        "second node status",
        is(Operation::Update, "_/nodestatus/edge-test"),
    )
    .await?;

    // A downstream object is stored, then acked.
    session.send(pod("5")).await?;
    let ack = next_msg(
        &mut events,
        "ack of down-5",
        answer_to(Operation::Ack, "down-5"),
    )
    .await?;
    assert_eq!(ack.resource(), "default/pod/web");
    let key = ResourceKey::new("default", ResourceType::Pod, "web");
    assert_eq!(store.get(&key)?.context("stored")?.resource_version, "5");

    // A stale version is acked but not stored.
    session.send(pod("4")).await?;
    next_msg(
        &mut events,
        "ack of down-4",
        answer_to(Operation::Ack, "down-4"),
    )
    .await?;
    assert_eq!(
        store.get(&key)?.context("still stored")?.resource_version,
        "5"
    );

    // A malformed message is answered with an error and changes nothing.
    let bad = Message::build(
        "down-bad",
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "default/pod/web",
        b"not json".to_vec(),
    );
    session.send(bad).await?;
    let err = next_msg(
        &mut events,
        "error reply",
        answer_to(Operation::Error, "down-bad"),
    )
    .await?;
    assert!(String::from_utf8_lossy(&err.content).contains("JSON"));
    assert_eq!(
        store.get(&key)?.context("still stored")?.resource_version,
        "5"
    );

    // cloudhub drops the stream: edgecore reconnects (backoff <= 100 ms) with the new inventory
    // and registers the node again.
    session.kill.cancel();
    let (hello, _session) = next_hello(&mut events).await?;
    let inventory = hello.inventory.context("inventory")?.entries;
    assert!(
        inventory
            .iter()
            .any(|e| e.name == "web" && e.resource_version == "5" && e.uid == "uid-web")
    );
    next_msg(
        &mut events,
        "node insert after reconnect",
        is(Operation::Insert, "_/node/edge-test"),
    )
    .await?;

    shutdown.cancel();
    tokio::time::timeout(STEP, run)
        .await
        .context("edgecore did not stop")???;
    Ok(())
}

#[tokio::test]
async fn silent_cloudhub_triggers_reconnect() -> Result<()> {
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(false).await?;
    let dir = tempfile::tempdir()?;
    let edgecore = EdgeCore::new(config(url, dir.path()))?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(edgecore.run(shutdown.clone()));

    let (_hello, _first) = next_hello(&mut events).await?;
    let started = tokio::time::Instant::now();
    // Keepalives are sent, but never answered: after 3 intervals edgecore gives up.
    let (_hello, _second) = next_hello(&mut events).await?;
    // Three silent intervals (less a margin: the deadline starts just before our clock).
    let silence = Duration::from_millis(3 * KEEPALIVE_MS - 50);
    assert!(
        started.elapsed() >= silence,
        "reconnected after {:?}",
        started.elapsed()
    );

    shutdown.cancel();
    tokio::time::timeout(STEP, run)
        .await
        .context("edgecore did not stop")???;
    Ok(())
}

/// Certificate rotation: a renewal over the mutual-TLS connection stores a new key and
/// certificate for the same node, and the next session uses them; an expired certificate
/// is refused locally with an error that says how to re-join.
#[tokio::test]
async fn certificate_renewal_and_expiry() -> Result<()> {
    use verge_edgecore::certificates::{self, Credentials};
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let config = config(url, dir.path());
    let credentials = Credentials::of(&config.hub_settings());
    let before = credentials.load()?;
    certificates::renew_once(&config.hub_settings(), &credentials).await?;
    let after = credentials.load()?;
    assert_ne!(before.cert_pem, after.cert_pem, "a new certificate");
    assert_ne!(before.key.expose(), after.key.expose(), "a new key");
    assert!(after.info.not_after > before.info.not_after);
    after.check("edge-test", std::time::SystemTime::now())?;

    // The renewed credentials open a session.
    let edgecore = EdgeCore::new(config.clone())?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(edgecore.run(shutdown.clone()));
    let (hello, _session) = next_hello(&mut events).await?;
    assert_eq!(hello.node_name, "edge-test");
    shutdown.cancel();
    run.await??;

    // Long offline: past notAfter, nothing connects and the error names the way back.
    let later = after.info.not_after + Duration::from_secs(1);
    let error = after.check("edge-test", later).expect_err("expired");
    let text = error.to_string();
    assert!(
        text.contains("expired") && text.contains("edgecore join"),
        "{text}"
    );
    let error = after
        .check("other-node", std::time::SystemTime::now())
        .expect_err("other");
    assert!(error.to_string().contains("other-node"), "{error}");
    Ok(())
}
