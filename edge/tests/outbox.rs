//! Component test of the upstream outbox (architecture.md §3.3) against the in-test fake cloudhub:
//! reports made while disconnected arrive after connect; an ack removes a report, and only
//! the acked version of it; unacked reports are resent after a reconnect and after an
//! edgecore restart; refused reports are retried, then dropped after `max_attempts`.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use verge_core::{Envelope, Group, Operation, ResourceKey, ResourceType};
use verge_edge_store::OutboxKey;
use verge_edgecore::{Config, EdgeCore, EdgeHub, EdgeHubHandle, MetaStore};
use verge_proto::{Message, MessageExt};

use common::{STEP, SessionCtl, config, is, next_hello, next_msg, start_fake};

fn status(id: &str, pod: &str) -> (OutboxKey, Envelope) {
    let key = OutboxKey::pod_status(&ResourceKey::new("ns", ResourceType::Pod, pod));
    let msg = Message::build(
        id,
        "edged",
        Group::Resource,
        Operation::Update,
        format!("ns/podstatus/{pod}"),
        br#"{"phase":"Running"}"#.to_vec(),
    )
    .with_object(format!("uid-{pod}"), "");
    (key, Envelope::try_from(msg).expect("valid"))
}

/// The controller's answer to `msg`, as cloudhub forwards it.
async fn answer(session: &SessionCtl, msg: &Message, op: Operation, reason: &str) -> Result<()> {
    let reply = Message::reply(
        format!("answer-{}", msg.id()),
        msg.id(),
        "edgecontroller",
        Group::Resource,
        op,
        msg.resource(),
        reason.as_bytes().to_vec(),
    );
    session.send(reply).await
}

fn with_id(id: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.id() == id
}

/// Waits until the outbox holds `n` entries.
async fn outbox_len(store: &MetaStore, n: u64) -> Result<()> {
    tokio::time::timeout(STEP, async {
        while store.outbox_len()? != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("outbox never held {n} entries"))?
}

/// An edgehub alone (no metamanager, edged or node agent) over a store in `dir`.
fn hub(
    url: String,
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut Config),
) -> Result<(EdgeHub, EdgeHubHandle, MetaStore, mpsc::Receiver<Envelope>)> {
    let mut config = config(url, dir);
    config.edge_hub.outbox.retry_backoff = Duration::from_millis(100);
    tweak(&mut config);
    let store = MetaStore::open(&config.store_path())?;
    let (down_tx, down_rx) = mpsc::channel(16);
    let (hub, handle) = EdgeHub::new(Arc::new(config.hub_settings()), store.clone(), down_tx);
    Ok((hub, handle, store, down_rx))
}

#[tokio::test]
async fn reports_wait_offline_coalesce_and_leave_on_their_ack() -> Result<()> {
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let (hub, handle, store, _down) = hub(url, dir.path(), |_| {})?;

    // Disconnected: reports wait in the outbox, coalesced by key.
    let (a, a0) = status("a0", "a");
    handle.report(a0).await?;
    let (_, b1) = status("b1", "b");
    handle.report(b1).await?;
    let (_, a1) = status("a1", "a");
    handle.report(a1).await?;
    outbox_len(&store, 2).await?;
    // An event from a caller that cannot wait: committed by edgehub's writer once it runs.
    let event = Message::build(
        "e1",
        "edged",
        Group::Resource,
        Operation::Insert,
        "ns/event/web.1",
        b"{}".to_vec(),
    );
    handle.try_report(Envelope::try_from(event)?)?;

    let shutdown = CancellationToken::new();
    let run = tokio::spawn(hub.run(shutdown.clone()));
    let (_, session) = next_hello(&mut events).await?;
    let first = next_msg(&mut events, "first report", |_| true).await?;
    let second = next_msg(&mut events, "second report", |_| true).await?;
    ensure!(
        (first.id(), second.id()) == ("b1", "a1"),
        "FIFO order, newest of a only: {} {}",
        first.id(),
        second.id()
    );

    let event = next_msg(&mut events, "event", with_id("e1")).await?;

    // An ack removes its report; the unacked one is resent after a reconnect.
    answer(&session, &first, Operation::Ack, "").await?;
    answer(&session, &event, Operation::Ack, "").await?;
    outbox_len(&store, 1).await?;
    session.kill.cancel();
    let (_, session) = next_hello(&mut events).await?;
    let again = next_msg(&mut events, "a1 again", with_id("a1")).await?;

    // A newer report of a key in flight is sent after it; the old ack leaves the new one.
    let (_, a2) = status("a2", "a");
    handle.report(a2).await?;
    let newer = next_msg(&mut events, "a2", with_id("a2")).await?;
    answer(&session, &again, Operation::Ack, "").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let left = store.outbox_get(&a.to_string())?.context("a2 kept")?;
    ensure!(left.id == "a2", "kept {}", left.id);
    answer(&session, &newer, Operation::Ack, "").await?;
    outbox_len(&store, 0).await?;

    shutdown.cancel();
    tokio::time::timeout(STEP, run).await???;
    Ok(())
}

#[tokio::test]
async fn refused_reports_are_retried_then_dropped() -> Result<()> {
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let (hub, handle, store, _down) = hub(url, dir.path(), |c| c.edge_hub.outbox.max_attempts = 2)?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(hub.run(shutdown.clone()));
    let (_, session) = next_hello(&mut events).await?;

    // Routing errors from cloudhub do not count; a controller's refusal does.
    let (key, msg) = status("r1", "gone");
    handle.report(msg).await?;
    let sent = next_msg(&mut events, "r1", with_id("r1")).await?;
    let unrouted = Message::reply(
        "cloudhub-error",
        "r1",
        "cloudhub",
        Group::Resource,
        Operation::Error,
        sent.resource(),
        b"no controller attached for group \"resource\"".to_vec(),
    );
    session.send(unrouted).await?;
    let sent = next_msg(&mut events, "r1 retried", with_id("r1")).await?;
    answer(&session, &sent, Operation::Error, "pods \"gone\" not found").await?;
    let sent = next_msg(&mut events, "r1 retried again", with_id("r1")).await?;
    let entry = store
        .outbox_get(&key.to_string())?
        .context("still stored")?;
    ensure!(entry.attempts == 1, "attempts {}", entry.attempts);
    answer(&session, &sent, Operation::Error, "pods \"gone\" not found").await?;
    outbox_len(&store, 0).await?;

    shutdown.cancel();
    tokio::time::timeout(STEP, run).await???;
    Ok(())
}

#[tokio::test]
async fn unacked_report_is_resent_after_an_edgecore_restart() -> Result<()> {
    verge_telemetry::init_for_tests();
    let (url, mut events) = start_fake(true).await?;
    let dir = tempfile::tempdir()?;
    let (key, msg) = status("p1", "web");

    let edgecore = EdgeCore::new(config(url.clone(), dir.path()))?;
    edgecore.store().outbox_put(
        &msg,
        &verge_proto::envelope::encode(&msg),
        verge_edge_store::OutboxLimits::entries(10),
    )?;
    let key = key.to_string();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(edgecore.run(shutdown.clone()));
    next_hello(&mut events).await?;
    next_msg(&mut events, "p1", with_id("p1")).await?;
    // Never acked: edgecore stops with the report still stored.
    shutdown.cancel();
    tokio::time::timeout(STEP, run).await???;

    let edgecore = EdgeCore::new(config(url, dir.path()))?;
    let store = edgecore.store().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(edgecore.run(shutdown.clone()));
    let (_, session) = next_hello(&mut events).await?;
    let again = next_msg(&mut events, "p1 after restart", with_id("p1")).await?;
    ensure!(again.resource() == "ns/podstatus/web");
    // The node's own durable reports go the same way.
    next_msg(
        &mut events,
        "node registration",
        is(Operation::Insert, "_/node/edge-test"),
    )
    .await?;
    answer(&session, &again, Operation::Ack, "").await?;
    tokio::time::timeout(STEP, async {
        while store.outbox_get(&key)?.is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })
    .await??;

    shutdown.cancel();
    tokio::time::timeout(STEP, run).await???;
    Ok(())
}
