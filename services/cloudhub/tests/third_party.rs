//! Third-party controllers on ControllerHub (architecture.md §11): a controller that is not Verge's
//! own attaches with its own service-account token for the groups RBAC grants it, one user per
//! group; it may send only its own groups; its messages reach the edge with Verge's delivery
//! (acknowledged, never coalesced) and the edge's messages of its group reach it; what the edge
//! never acknowledged before its session ended comes back as `SESSION_ENDED`. (The cluster's
//! TokenReview and SubjectAccessReview are a fake of our `ClusterApi`; the e2e tests use the real
//! API server and RBAC.)
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::cluster::{RIVAL_TOKEN, ROBOTS_GROUP, ROBOTS_TOKEN, STRANGER_TOKEN};
use common::{Controller, Edge, attach, connect, start, try_attach};
use tonic::Code;
use verge_core::{Group, Operation};
use verge_proto::hub::{DeliveryError, DeliveryFailure, Routed, hub_frame};
use verge_proto::{Message, MessageExt};

fn robots() -> Group {
    ROBOTS_GROUP.parse().unwrap()
}

/// A downstream command of the robots group for `default/robot/<name>` on `node`.
fn command(id: &str, node: &str, name: &str, group: Group) -> Message {
    Message::build(
        id,
        "robots-controller",
        group,
        Operation::Update,
        format!("node/{node}/default/robot/{name}"),
        format!("{{\"move\":\"{id}\"}}").into_bytes(),
    )
}

async fn attach_robots(hub: &common::Hub) -> Controller {
    try_attach(
        hub,
        "robots-controller",
        &[ROBOTS_GROUP],
        Some(ROBOTS_TOKEN),
    )
    .await
    .unwrap()
}

async fn delivery_error(ctrl: &mut Controller) -> DeliveryError {
    loop {
        match ctrl.next().await {
            hub_frame::Frame::DeliveryError(e) => return e,
            hub_frame::Frame::Session(_) => {}
            other => panic!("expected a delivery error, got {other:?}"),
        }
    }
}

/// Nothing reaches `edge` within half a second.
async fn nothing_reaches(edge: &mut Edge) {
    let next = tokio::time::timeout(Duration::from_millis(500), edge.rx.message()).await;
    assert!(next.is_err(), "the edge got {next:?}");
}

#[tokio::test]
async fn refusals_name_their_reason() {
    let hub = start(common::config()).await;
    // No credentials.
    let status = try_attach(&hub, "robots-controller", &[ROBOTS_GROUP], None)
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    // Verge's own group, claimed by a third party.
    let status = try_attach(&hub, "robots-controller", &["resource"], Some(ROBOTS_TOKEN))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("\"resource\"")
            && status.message().contains("trust.controllerUsers"),
        "{status:?}"
    );
    // A group RBAC does not grant it.
    for (token, group) in [
        (ROBOTS_TOKEN, "lights.example.com"),
        (STRANGER_TOKEN, ROBOTS_GROUP),
    ] {
        let status = try_attach(&hub, "x", &[group], Some(token))
            .await
            .err()
            .unwrap();
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert!(status.message().contains("RBAC"), "{status:?}");
    }
    // Malformed and reserved names.
    for group in ["Robots.example.com", "apps.verge.io", "robots"] {
        let status = try_attach(&hub, "x", &[group], Some(ROBOTS_TOKEN))
            .await
            .err()
            .unwrap();
        assert_eq!(status.code(), Code::InvalidArgument, "{group}: {status:?}");
    }
    // A group another user serves now; free again once it detaches.
    let owner = attach_robots(&hub).await;
    let status = try_attach(&hub, "rival", &[ROBOTS_GROUP], Some(RIVAL_TOKEN))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert!(
        status
            .message()
            .contains("system:serviceaccount:robots:controller"),
        "{status:?}"
    );
    // A second replica of the owner shares it.
    let _replica = try_attach(
        &hub,
        "robots-controller-2",
        &[ROBOTS_GROUP],
        Some(ROBOTS_TOKEN),
    )
    .await
    .unwrap();
    drop(owner);
    drop(_replica);
    let mut freed = false;
    for _ in 0..50 {
        if try_attach(&hub, "rival", &[ROBOTS_GROUP], Some(RIVAL_TOKEN))
            .await
            .is_ok()
        {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the group stays taken after its owner detached");
    hub.stop().await;
}

#[tokio::test]
async fn a_message_of_a_group_not_named_is_refused_and_reaches_no_edge() {
    let hub = start(common::config()).await;
    let mut ctrl = attach_robots(&hub).await;
    let mut edge = connect(&hub, "edge-1").await;
    assert_eq!(ctrl.session().await.node, "edge-1");
    let verge = Message::build(
        "c-1",
        "robots-controller",
        Group::Resource,
        Operation::Update,
        "node/edge-1/default/configmap/cfg",
        b"{}".to_vec(),
    );
    let lights = command(
        "c-1",
        "edge-1",
        "arm",
        "lights.example.com".parse().unwrap(),
    );
    for message in [verge, lights] {
        ctrl.send("edge-1", message).await;
        let error = delivery_error(&mut ctrl).await;
        assert_eq!(error.message_id, "c-1");
        assert_eq!(error.failure(), DeliveryFailure::GroupNotServed);
        assert!(
            error.reason.contains("not served by this controller"),
            "{error:?}"
        );
    }
    nothing_reaches(&mut edge).await;
    hub.stop().await;
}

#[tokio::test]
async fn commands_and_replies_round_trip_uncoalesced() {
    let hub = start(common::config()).await;
    let mut ctrl = attach_robots(&hub).await;
    // Verge's own controller keeps working beside it.
    let _verge = attach(&hub, "edgecontroller", &["resource"]).await;
    let mut edge = connect(&hub, "edge-1").await;
    assert_eq!(ctrl.session().await.node, "edge-1");

    // Two commands for one resource: both arrive, in order (no coalescing).
    ctrl.send("edge-1", command("c-1", "edge-1", "arm", robots()))
        .await;
    ctrl.send("edge-1", command("c-2", "edge-1", "arm", robots()))
        .await;
    let first = edge.next().await.unwrap();
    assert_eq!(first.id(), "c-1");
    assert_eq!(first.resource(), "default/robot/arm");
    assert_eq!(first.group().unwrap(), robots());
    edge.send(Message::reply(
        "a-1",
        "c-1",
        "metamanager",
        robots(),
        Operation::Ack,
        "",
        Vec::new(),
    ))
    .await;
    let second = edge.next().await.unwrap();
    assert_eq!(second.id(), "c-2");

    // The edge app's reply goes up to the group's controller.
    edge.send(Message::reply(
        "r-1",
        "c-1",
        "eventbus",
        robots(),
        Operation::Response,
        "default/robot/arm",
        b"{\"done\":true}".to_vec(),
    ))
    .await;
    // First the edge's ack of c-1 (the edge committed it), then the app's reply.
    let mut up = Vec::new();
    while up.len() < 2 {
        match ctrl.next().await {
            hub_frame::Frame::Message(m) => up.push(m),
            hub_frame::Frame::Session(_) => {}
            other => panic!("expected the ack and the reply, got {other:?}"),
        }
    }
    let ack = up.remove(0).message.unwrap();
    assert_eq!((ack.id(), ack.parent_id()), ("a-1", "c-1"));
    assert_eq!(ack.operation().unwrap(), Operation::Ack);
    let up = up.remove(0);
    assert_eq!(up.node, "edge-1");
    let reply = up.message.unwrap();
    // An answer names what it answers by its parent id, not by a resource.
    assert_eq!(reply.parent_id(), "c-1");
    assert_eq!(reply.content, b"{\"done\":true}");

    // A message of the app's own carries its resource, prefixed with the node.
    edge.send(Message::build(
        "e-1",
        "eventbus",
        robots(),
        Operation::Update,
        "default/robot/arm",
        b"{\"battery\":80}".to_vec(),
    ))
    .await;
    let Routed { node, message } = match ctrl.next().await {
        hub_frame::Frame::Message(m) => m,
        other => panic!("expected the app's message, got {other:?}"),
    };
    assert_eq!(node, "edge-1");
    assert_eq!(message.unwrap().resource(), "node/edge-1/default/robot/arm");
    hub.stop().await;
}

#[tokio::test]
async fn a_command_unacknowledged_when_the_session_ends_is_reported() {
    let hub = start(common::config()).await;
    let mut ctrl = attach_robots(&hub).await;
    let mut edge = connect(&hub, "edge-1").await;
    assert_eq!(ctrl.session().await.node, "edge-1");
    ctrl.send("edge-1", command("c-1", "edge-1", "arm", robots()))
        .await;
    assert_eq!(edge.next().await.unwrap().id(), "c-1");
    drop(edge);
    let error = delivery_error(&mut ctrl).await;
    assert_eq!(error.message_id, "c-1");
    assert_eq!(error.failure(), DeliveryFailure::SessionEnded);
    // Sent while the node is offline: refused at once, to be sent again on connect.
    ctrl.send("edge-1", command("c-2", "edge-1", "arm", robots()))
        .await;
    let error = delivery_error(&mut ctrl).await;
    assert_eq!(error.message_id, "c-2");
    assert_eq!(error.failure(), DeliveryFailure::NotConnected);
    hub.stop().await;
}
