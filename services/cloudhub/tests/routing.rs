//! Component tests of cloudhub routing and session handling over loopback.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

mod common;

use common::{attach, connect, start, update};
use verge_core::{Group, Operation};
use verge_proto::hub::hub_frame;
use verge_proto::{Message, MessageExt};

/// (a) hello -> welcome; upstream gets the node prefix; downstream loses it; acks route both
/// ways; a late controller gets a snapshot with the inventory.
#[tokio::test]
async fn messages_route_both_ways() {
    let hub = start(common::config()).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edge = connect(&hub, "edge-1").await;
    assert_eq!(edge.welcome.keepalive_interval_ms, 15_000);
    assert_eq!(edge.welcome.max_frame_bytes, 4 * 1024 * 1024);
    assert!(!edge.welcome.session_id.is_empty());

    let session = ctrl.session().await;
    assert_eq!(
        (
            session.node.as_str(),
            session.connected,
            session.cloudhub.as_str()
        ),
        ("edge-1", true, "test-hub")
    );
    assert_eq!(session.inventory.unwrap().entries.len(), 1);

    // Upstream: edge-side path gains the node prefix.
    edge.send(update("up-1", "_/nodestatus/edge-1")).await;
    let routed = ctrl.message().await;
    let up = routed.message.unwrap();
    assert_eq!(routed.node, "edge-1");
    assert_eq!(up.id(), "up-1");
    assert_eq!(up.resource(), "node/edge-1/_/nodestatus/edge-1");

    // The controller's ack reaches the edge with parent_id.
    let ack = Message::reply(
        "ack-1",
        "up-1",
        "edgecontroller",
        Group::Resource,
        Operation::Ack,
        "",
        vec![],
    );
    ctrl.send("edge-1", ack).await;
    let got = edge.next().await.unwrap();
    assert_eq!(
        (got.id(), got.parent_id(), got.operation()),
        ("ack-1", "up-1", Ok(Operation::Ack))
    );

    // Downstream: the prefix is stripped.
    let pod = Message::build(
        "down-1",
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "node/edge-1/default/pod/web",
        b"{}".to_vec(),
    );
    ctrl.send("edge-1", pod).await;
    let got = edge.next().await.unwrap();
    assert_eq!((got.id(), got.resource()), ("down-1", "default/pod/web"));

    // The edge's ack routes to the controller by group.
    edge.send(Message::reply(
        "ack-2",
        "down-1",
        "metamanager",
        Group::Resource,
        Operation::Ack,
        "",
        vec![],
    ))
    .await;
    let routed = ctrl.message().await;
    assert_eq!(routed.message.unwrap().parent_id(), "down-1");

    // A controller attaching later gets the current sessions first.
    let mut late = attach(&hub, "late", &["device"]).await;
    let snap = late.session().await;
    assert_eq!((snap.node.as_str(), snap.connected), ("edge-1", true));
    assert_eq!(snap.inventory.unwrap().entries[0].name, "web");

    drop(edge);
    let gone = ctrl.session().await;
    assert_eq!((gone.node.as_str(), gone.connected), ("edge-1", false));
    hub.stop().await;
}

/// (b) a second connection for the same node replaces the first.
#[tokio::test]
async fn newer_session_replaces_older() {
    let hub = start(common::config()).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut first = connect(&hub, "edge-1").await;
    assert!(ctrl.session().await.connected);
    let mut second = connect(&hub, "edge-1").await;
    assert_ne!(first.welcome.session_id, second.welcome.session_id);

    let status = first.ended().await;
    assert_eq!(status.code(), tonic::Code::Aborted);
    assert_eq!(status.message(), "replaced by a newer session");
    // The controller sees the new session, and no disconnect for the replaced one.
    let again = ctrl.session().await;
    assert_eq!((again.node.as_str(), again.connected), ("edge-1", true));

    let pod = Message::build(
        "d1",
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "node/edge-1/default/pod/a",
        vec![],
    );
    ctrl.send("edge-1", pod).await;
    assert_eq!(second.next().await.unwrap().id(), "d1");
    second.send(update("u1", "default/podstatus/a")).await;
    assert_eq!(ctrl.message().await.message.unwrap().id(), "u1");
    hub.stop().await;
}

/// (e) no controller for the group -> error reply; downstream to an unknown node ->
/// delivery_error; a node-mismatched path ends the controller stream.
#[tokio::test]
async fn unroutable_messages_are_answered() {
    let hub = start(common::config()).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edge = connect(&hub, "edge-1").await;
    ctrl.session().await;

    let twin = Message::build(
        "t1",
        "devicetwin",
        Group::Device,
        Operation::Update,
        "default/twin/dev-1",
        vec![],
    );
    edge.send(twin).await;
    let err = edge.next().await.unwrap();
    assert_eq!(
        (err.operation(), err.parent_id(), err.resource()),
        (Ok(Operation::Error), "t1", "default/twin/dev-1")
    );
    let reason = String::from_utf8(err.content).unwrap();
    assert_eq!(reason, "no controller attached for group \"device\"");

    let pod = Message::build(
        "d1",
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "node/ghost/default/pod/a",
        vec![],
    );
    ctrl.send("ghost", pod).await;
    match ctrl.next().await {
        hub_frame::Frame::DeliveryError(e) => {
            assert_eq!(
                (e.node.as_str(), e.message_id.as_str(), e.reason.as_str()),
                ("ghost", "d1", "node not connected")
            );
        }
        other => panic!("expected a delivery error, got {other:?}"),
    }

    // The edge still works.
    edge.send(update("u2", "default/podstatus/a")).await;
    assert_eq!(ctrl.message().await.message.unwrap().id(), "u2");

    // A path naming another node than Routed.node is malformed: the controller stream ends.
    let bad = Message::build(
        "d2",
        "edgecontroller",
        Group::Resource,
        Operation::Insert,
        "node/edge-2/default/pod/a",
        vec![],
    );
    ctrl.send("edge-1", bad).await;
    let status = tokio::time::timeout(common::WAIT, async {
        loop {
            match ctrl.rx.message().await {
                Err(s) => return s,
                Ok(Some(_)) => {}
                Ok(None) => panic!("expected an error status"),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    hub.stop().await;
}

/// A controller that falls behind slows its edges down instead of losing their messages:
/// with a controller queue of 2 frames, 40 messages of 64 KiB (more than the HTTP/2 windows
/// hold) from one edge all reach the controller, in order, once it reads again, and the
/// edge gets no `error` answer (cloudhub waited for room, `upstream_wait`).
#[tokio::test]
async fn full_controller_queue_applies_back_pressure() {
    let config = verge_cloudhub::Config {
        controller_queue_len: 2,
        ..common::config()
    };
    let hub = start(config).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let edge = connect(&hub, "edge-1").await;
    assert!(ctrl.session().await.connected);

    const N: usize = 40;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            let mut m = update(&format!("up-{i}"), &format!("default/podstatus/p{i}"));
            m.content = vec![b'x'; 64 * 1024];
            edge.send(m).await;
        }
        edge
    });
    // The controller reads nothing for a while: the queue (2) and the transport fill up.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    for i in 0..N {
        let routed = ctrl.message().await;
        assert_eq!(routed.message.unwrap().id(), format!("up-{i}"));
    }
    let mut edge = sender.await.unwrap();
    edge.send(common::keepalive("probe")).await;
    let next = edge.next().await.unwrap();
    assert_eq!(
        (next.operation(), next.parent_id()),
        (Ok(Operation::Keepalive), "probe"),
        "the edge got {next:?} instead of the keepalive answer"
    );
}

/// A newer attach of the same controller name (same user) takes over: the older stream ends
/// with ABORTED and upstream messages go to the newer one only; another controller of the
/// same group is unaffected (both newest streams share the group round-robin).
#[tokio::test]
async fn newest_controller_attach_of_a_name_takes_over() {
    let hub = start(common::config()).await;
    let edge = connect(&hub, "edge-1").await;
    let mut old = attach(&hub, "edgecontroller", &["resource"]).await;
    assert!(old.session().await.connected);
    let mut new = attach(&hub, "edgecontroller", &["resource"]).await;
    assert!(
        new.session().await.connected,
        "the newer attach gets the snapshot"
    );
    let status = loop {
        match tokio::time::timeout(common::WAIT, old.rx.message()).await {
            Ok(Err(status)) => break status,
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => panic!("ended without a status"),
            Err(_) => panic!("the older stream did not end"),
        }
    };
    assert_eq!(status.code(), tonic::Code::Aborted, "{status:?}");
    assert!(status.message().contains("newer attach"), "{status:?}");

    for i in 0..4 {
        let id = format!("up-{i}");
        edge.send(update(&id, "_/nodestatus/edge-1")).await;
        assert_eq!(new.message().await.message.unwrap().id(), id);
    }

    // Another name serving the same group shares the messages with the newest stream.
    let mut other = attach(&hub, "edgecontroller-b", &["resource"]).await;
    assert!(other.session().await.connected);
    let mut seen = (0, 0);
    for i in 0..4 {
        edge.send(update(&format!("rr-{i}"), "_/nodestatus/edge-1"))
            .await;
    }
    while seen.0 + seen.1 < 4 {
        tokio::select! {
            _ = new.message() => seen.0 += 1,
            _ = other.message() => seen.1 += 1,
        }
    }
    assert_eq!(seen, (2, 2), "round-robin over the two names");
    drop(edge);
    hub.stop().await;
}
