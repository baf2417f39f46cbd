//! Component tests of cloudhub's handshake checks, keepalive and frame limits.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{attach, connect, edge_msg, keepalive, open_edge, open_raw_edge, start, update};
use tonic::Code;
use verge_cloudhub::Config;
use verge_core::{Group, Operation};
use verge_proto::{Message, MessageExt};

/// (c) keepalives are answered; a silent edge is dropped after three intervals.
#[tokio::test]
async fn keepalive_answered_and_silent_edge_dropped() {
    let interval = Duration::from_millis(500);
    let hub = start(Config {
        keepalive_interval: interval,
        ..common::config()
    })
    .await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edge = connect(&hub, "edge-1").await;
    assert_eq!(edge.welcome.keepalive_interval_ms, 500);
    ctrl.session().await;

    // Keepalives more often than the timeout keep the session alive.
    let mut last_frame = Instant::now();
    for i in 0..4 {
        tokio::time::sleep(interval).await;
        last_frame = Instant::now();
        edge.send(keepalive(&format!("k{i}"))).await;
        let reply = edge.next().await.unwrap();
        assert_eq!(
            (reply.operation(), reply.group(), reply.parent_id()),
            (
                Ok(Operation::Keepalive),
                Ok(Group::Hub),
                format!("k{i}").as_str()
            )
        );
    }

    // Then silence: closed three intervals after the last frame.
    let status = edge.ended().await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let silent = last_frame.elapsed();
    assert!(silent >= interval * 3, "closed too early: {silent:?}");
    let gone = ctrl.session().await;
    assert_eq!((gone.node.as_str(), gone.connected), ("edge-1", false));
    hub.stop().await;
}

/// (d) an oversized frame and malformed frames end only their own stream; a third node keeps
/// exchanging messages.
#[tokio::test]
async fn bad_frames_end_only_their_stream() {
    let max = 64 * 1024;
    let hub = start(Config {
        max_frame_bytes: max,
        ..common::config()
    })
    .await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut good = connect(&hub, "good").await;
    assert_eq!(good.welcome.max_frame_bytes, max as u64);
    assert!(ctrl.session().await.connected);

    // Oversized frame -> RESOURCE_EXHAUSTED on that stream.
    let mut big = connect(&hub, "big").await;
    ctrl.session().await;
    let mut huge = update("huge", "default/podstatus/a");
    huge.content = vec![b'x'; max * 2];
    big.send(huge).await;
    assert_eq!(big.ended().await.code(), Code::ResourceExhausted);
    let gone = ctrl.session().await;
    assert_eq!((gone.node.as_str(), gone.connected), ("big", false));

    // First frame a message instead of a hello -> INVALID_ARGUMENT for that call.
    let status = open_edge(&hub, edge_msg(update("x", "default/pod/a")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("hello"), "{status:?}");

    // An unparsable path -> INVALID_ARGUMENT naming the problem.
    let mut garbage = connect(&hub, "garbage").await;
    ctrl.session().await;
    garbage.send(update("bad-path", "not/a/valid/path")).await;
    let status = garbage.ended().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("not/a/valid/path"), "{status:?}");
    ctrl.session().await;

    // Bytes that are not protobuf after a valid hello -> INVALID_ARGUMENT.
    let hello = prost::Message::encode_to_vec(&common::hello("edge-raw"));
    let mut raw = open_raw_edge(&hub, vec![hello, vec![0xff; 16]])
        .await
        .unwrap();
    let welcome = raw.message().await.unwrap().unwrap();
    assert!(matches!(
        welcome.frame,
        Some(verge_proto::hub::cloud_frame::Frame::Welcome(_))
    ));
    let status = tokio::time::timeout(common::WAIT, raw.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("malformed frame"), "{status:?}");
    ctrl.session().await;
    ctrl.session().await;

    // A message without an id -> INVALID_ARGUMENT.
    let mut no_id = connect(&hub, "no-id").await;
    ctrl.session().await;
    no_id
        .send(Message {
            header: None,
            ..update("", "default/pod/a")
        })
        .await;
    let status = no_id.ended().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("header.id"), "{status:?}");
    ctrl.session().await;

    // The good node is unaffected, both ways.
    good.send(update("still-up", "default/podstatus/web")).await;
    let routed = ctrl.message().await;
    assert_eq!(
        (routed.node.as_str(), routed.message.unwrap().resource()),
        ("good", "node/good/default/podstatus/web")
    );
    let pod = Message::build(
        "still-down",
        "edgecontroller",
        Group::Resource,
        Operation::Update,
        "node/good/default/pod/web",
        vec![],
    );
    ctrl.send("good", pod).await;
    assert_eq!(good.next().await.unwrap().id(), "still-down");
    hub.stop().await;
}

/// Shutdown ends open streams with UNAVAILABLE and returns.
#[tokio::test]
async fn shutdown_ends_streams() {
    let hub = start(common::config()).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edge = connect(&hub, "edge-1").await;
    ctrl.session().await;
    let stopping = tokio::spawn(hub.stop());
    assert_eq!(edge.ended().await.code(), Code::Unavailable);
    tokio::time::timeout(common::WAIT, stopping)
        .await
        .unwrap()
        .unwrap();
}

/// Abuse limits: sessions per replica, inventory size and the per-node message rate, each
/// refused with a clear error while the nodes within the limits keep working.
#[tokio::test]
async fn sessions_inventories_and_rates_are_bounded() {
    let hub = start(Config {
        max_sessions: 2,
        max_inventory_entries: 1,
        node_message_rate: 1,
        node_message_burst: 2,
        ..common::config()
    })
    .await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;

    // An inventory of two entries (the limit is one) is refused.
    let mut big_hello = common::hello("edge-inv");
    if let Some(verge_proto::hub::edge_frame::Frame::Hello(h)) = big_hello.frame.as_mut()
        && let Some(inventory) = h.inventory.as_mut()
    {
        let mut second = inventory.entries[0].clone();
        second.name = "other".into();
        inventory.entries.push(second);
    }
    let status = common::open_edge_as(&hub, "edge-inv", big_hello)
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("maxInventoryEntries"),
        "{status:?}"
    );

    // Two sessions fit; a third node is refused, a node replacing its own session is not.
    let mut one = connect(&hub, "edge-1").await;
    ctrl.session().await;
    let _two = connect(&hub, "edge-2").await;
    ctrl.session().await;
    let status = common::connect_as(&hub, "edge-3", "edge-3")
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("maxSessions"), "{status:?}");
    let _two_again = connect(&hub, "edge-2").await;
    assert!(ctrl.session().await.connected, "edge-2's new session");

    // Rate: the burst of two passes, the third message at once is answered "rate limited";
    // keepalives are not counted.
    for id in ["r1", "r2", "r3"] {
        one.send(update(id, "default/podstatus/a")).await;
    }
    for _ in 0..2 {
        let forwarded = ctrl.message().await;
        assert_eq!(forwarded.node, "edge-1");
    }
    let answer = one.next().await.unwrap();
    assert_eq!(answer.parent_id(), "r3");
    assert_eq!(answer.operation(), Ok(Operation::Error));
    let reason = String::from_utf8_lossy(&answer.content).to_string();
    assert!(reason.contains("rate limited"), "{reason}");
    one.send(keepalive("k")).await;
    assert_eq!(one.next().await.unwrap().parent_id(), "k");
    hub.stop().await;
}

/// Issue 31, weakness 5: queues are bounded in bytes, not only in messages. A node sends
/// forty 1 MiB reports while its controller takes nothing: cloudhub queues only what the
/// node's byte budget holds (`nodeUpstreamBytes`), answers the rest `error` after
/// `upstreamWait` (the edge keeps them in its outbox), and another node's downstream
/// messages still reach it meanwhile. Before, all forty waited in the controller's queue
/// (4,096 frames of up to 4 MiB each).
#[tokio::test]
async fn large_reports_are_bounded_by_bytes() {
    const MIB: usize = 1024 * 1024;
    let hub = start(Config {
        max_frame_bytes: MIB + 64 * 1024,
        node_upstream_bytes: 3 * MIB,
        controller_queue_bytes: 4 * MIB,
        upstream_wait: Duration::from_millis(200),
        node_message_rate: 10_000,
        node_message_burst: 10_000,
        ..common::config()
    })
    .await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let flood = connect(&hub, "flood").await;
    let mut other = connect(&hub, "other").await;
    ctrl.session().await;
    ctrl.session().await;

    let common::Edge { tx, mut rx, .. } = flood;
    let sender = tokio::spawn(async move {
        for i in 0..40 {
            let mut report = update(&format!("r{i}"), "default/podstatus/a");
            report.content = vec![b'x'; MIB];
            if tx.send(edge_msg(report)).await.is_err() {
                break;
            }
        }
        tx
    });
    // The flooding node gets `error` answers for what did not fit.
    let answers = tokio::spawn(async move {
        let mut refused = 0;
        while let Ok(Ok(Some(frame))) =
            tokio::time::timeout(Duration::from_secs(3), rx.message()).await
        {
            if let Some(verge_proto::hub::cloud_frame::Frame::Message(m)) = frame.frame
                && m.operation() == Ok(Operation::Error)
            {
                refused += 1;
            }
        }
        refused
    });
    // Another node's messages still go both ways meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    other
        .send(update("from-other", "default/podstatus/web"))
        .await;
    let pod = Message::build(
        "to-other",
        "edgecontroller",
        Group::Resource,
        Operation::Update,
        "node/other/default/pod/web",
        vec![],
    );
    ctrl.send("other", pod).await;
    assert_eq!(other.next().await.unwrap().id(), "to-other");
    let _tx = sender.await.unwrap();
    let refused = answers.await.unwrap();

    // The controller finally reads: only what the byte budgets held was queued.
    let mut queued = 0;
    while let Ok(Ok(Some(frame))) =
        tokio::time::timeout(Duration::from_secs(2), ctrl.rx.message()).await
    {
        if let Some(verge_proto::hub::hub_frame::Frame::Message(routed)) = frame.frame
            && routed.node == "flood"
        {
            queued += 1;
        }
    }
    assert!(
        queued <= 10,
        "{queued} reports of 1 MiB were queued for the controller ({refused} refused)"
    );
    assert_eq!(queued + refused, 40, "each report queued or refused");
    hub.stop().await;
}
