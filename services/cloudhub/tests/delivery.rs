//! Component tests of at-least-once downstream delivery: retries, acks, coalescing and the
//! per-node bound, over loopback with real tonic clients.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Controller, Edge, attach, connect, keepalive, start};
use verge_cloudhub::Config;
use verge_core::{Group, Operation};
use verge_proto::hub::{DeliveryError, hub_frame};
use verge_proto::{Message, MessageExt};

const ACK_TIMEOUT: Duration = Duration::from_millis(300);

/// An `update` of pod `default/<name>` for `node`, with id `id`.
fn pod(node: &str, id: &str, name: &str) -> Message {
    Message::build(
        id,
        "edgecontroller",
        Group::Resource,
        Operation::Update,
        format!("node/{node}/default/pod/{name}"),
        b"{}".to_vec(),
    )
}

/// The edge's ack of `id` (as metamanager sends it after its commit).
fn ack(id: &str) -> Message {
    Message::reply(
        format!("ack-{id}"),
        id,
        "metamanager",
        Group::Resource,
        Operation::Ack,
        "",
        Vec::new(),
    )
}

/// Asserts that nothing else is on its way to `edge`: a keepalive's answer comes next.
async fn nothing_more(edge: &mut Edge) {
    edge.send(keepalive("probe")).await;
    let next = edge.next().await.unwrap();
    assert_eq!(
        (next.operation(), next.parent_id()),
        (Ok(Operation::Keepalive), "probe"),
        "unexpected {next:?}"
    );
}

async fn delivery_error(ctrl: &mut Controller) -> DeliveryError {
    match ctrl.next().await {
        hub_frame::Frame::DeliveryError(e) => e,
        other => panic!("expected a delivery error, got {other:?}"),
    }
}

async fn hub_with(config: Config, nodes: &[&str]) -> (common::Hub, Controller, Vec<Edge>) {
    let hub = start(config).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edges = Vec::new();
    for node in nodes {
        edges.push(connect(&hub, node).await);
        assert!(ctrl.session().await.connected);
    }
    (hub, ctrl, edges)
}

/// An edge that does not ack gets the message again, same id, after `ack_timeout`; after
/// `max_retries` the controller is told.
#[tokio::test]
async fn unacked_message_is_resent_then_reported() {
    let config = Config {
        ack_timeout: ACK_TIMEOUT,
        max_retries: 1,
        ..common::config()
    };
    let (hub, mut ctrl, mut edges) = hub_with(config, &["edge-1"]).await;
    let edge = &mut edges[0];
    // Taken before the send, so never later than cloudhub's own ack timer starts.
    let sent = Instant::now();
    ctrl.send("edge-1", pod("edge-1", "d1", "web")).await;
    let first = edge.next().await.unwrap();
    assert_eq!((first.id(), first.resource()), ("d1", "default/pod/web"));
    let again = edge.next().await.unwrap();
    assert_eq!(again.id(), "d1");
    assert!(sent.elapsed() >= ACK_TIMEOUT, "{:?}", sent.elapsed());
    let e = delivery_error(&mut ctrl).await;
    assert_eq!(
        (e.node.as_str(), e.message_id.as_str(), e.reason.as_str()),
        ("edge-1", "d1", "not acknowledged after 2 attempts")
    );
    nothing_more(edge).await;
    hub.stop().await;
}

/// An edge that acks gets the message once; the ack still reaches the controller.
#[tokio::test]
async fn acked_message_is_delivered_once() {
    let config = Config {
        ack_timeout: ACK_TIMEOUT,
        ..common::config()
    };
    let (hub, mut ctrl, mut edges) = hub_with(config, &["edge-1"]).await;
    let edge = &mut edges[0];
    ctrl.send("edge-1", pod("edge-1", "d1", "web")).await;
    assert_eq!(edge.next().await.unwrap().id(), "d1");
    edge.send(ack("d1")).await;
    assert_eq!(ctrl.message().await.message.unwrap().parent_id(), "d1");
    tokio::time::sleep(ACK_TIMEOUT * 3).await;
    nothing_more(edge).await;
    hub.stop().await;
}

/// A burst of updates of one object to an edge that has not acked the first: the edge gets
/// the first, then only the newest; other objects are not held up.
#[tokio::test]
async fn burst_to_slow_edge_is_coalesced() {
    let (hub, ctrl, mut edges) = hub_with(common::config(), &["edge-1"]).await;
    let edge = &mut edges[0];
    ctrl.send("edge-1", pod("edge-1", "v1", "web")).await;
    assert_eq!(edge.next().await.unwrap().id(), "v1");
    for v in 2..=10 {
        ctrl.send("edge-1", pod("edge-1", &format!("v{v}"), "web"))
            .await;
    }
    ctrl.send("edge-1", pod("edge-1", "other", "db")).await;
    assert_eq!(edge.next().await.unwrap().id(), "other");
    edge.send(ack("v1")).await;
    assert_eq!(edge.next().await.unwrap().id(), "v10");
    edge.send(ack("v10")).await;
    edge.send(ack("other")).await;
    nothing_more(edge).await;
    hub.stop().await;
}

/// A node whose queue is full makes the controller get a delivery error naming it, while
/// another node's traffic flows; the full node gets its queued messages once it acks.
#[tokio::test]
async fn full_queue_reports_while_other_nodes_flow() {
    let config = Config {
        session_queue_len: 2,
        max_inflight: 1,
        ..common::config()
    };
    let (hub, mut ctrl, mut edges) = hub_with(config, &["slow", "fast"]).await;
    let [slow, fast] = &mut edges[..] else {
        unreachable!()
    };
    ctrl.send("slow", pod("slow", "a", "a")).await;
    assert_eq!(slow.next().await.unwrap().id(), "a");
    for name in ["b", "c", "d"] {
        ctrl.send("slow", pod("slow", name, name)).await;
    }
    let e = delivery_error(&mut ctrl).await;
    assert_eq!(
        (e.node.as_str(), e.message_id.as_str(), e.reason.as_str()),
        ("slow", "d", "queue full: node slow has 2 messages waiting")
    );
    for i in 0..3 {
        let id = format!("f{i}");
        ctrl.send("fast", pod("fast", &id, "web")).await;
        assert_eq!(fast.next().await.unwrap().id(), id);
        fast.send(ack(&id)).await;
        assert_eq!(ctrl.message().await.message.unwrap().parent_id(), id);
    }
    for (acked, next) in [("a", "b"), ("b", "c")] {
        slow.send(ack(acked)).await;
        assert_eq!(slow.next().await.unwrap().id(), next);
    }
    hub.stop().await;
}

/// A replacing session starts with an empty queue: what the old one had in flight is not
/// resent (the node resyncs by inventory instead).
#[tokio::test]
async fn replacing_session_starts_empty() {
    let config = Config {
        ack_timeout: ACK_TIMEOUT,
        ..common::config()
    };
    let (hub, mut ctrl, mut edges) = hub_with(config, &["edge-1"]).await;
    ctrl.send("edge-1", pod("edge-1", "d1", "web")).await;
    assert_eq!(edges[0].next().await.unwrap().id(), "d1");
    let mut second = connect(&hub, "edge-1").await;
    assert!(ctrl.session().await.connected);
    tokio::time::sleep(ACK_TIMEOUT * 2).await;
    nothing_more(&mut second).await;
    ctrl.send("edge-1", pod("edge-1", "d2", "web")).await;
    assert_eq!(second.next().await.unwrap().id(), "d2");
    hub.stop().await;
}
