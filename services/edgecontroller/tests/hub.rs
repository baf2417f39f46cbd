//! Component test of the hub streams: hello, re-attach after the stream ends, error answers,
//! per-node ordering, several replicas. Uses an in-test ControllerHub and an API server address nobody listens
//! on, so every API call fails fast.

mod common;

use std::time::Duration;

use serde_json::json;
use verge_core::Operation;
use verge_edgecontroller::Config;
use verge_proto::MessageExt;
use verge_proto::hub::{NodeSession, hub_frame};

use common::{Controller, msg, reason};

fn unreachable_client() -> anyhow::Result<kube::Client> {
    // Port 9 (discard) on loopback: connections are refused at once.
    let mut config = kube::Config::new("http://127.0.0.1:9".parse()?);
    config.connect_timeout = Some(Duration::from_secs(1));
    Ok(kube::Client::try_from(config)?)
}

#[tokio::test]
async fn reattaches_and_answers_errors() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let (addr, mut attaches) = common::start().await?;
    let config = Config {
        cloudhub: vec![format!("https://{addr}")],
        cloudhub_auth: common::hub_auth(),
        leader_election: common::no_leader_election(),
        reconnect_min_backoff: Duration::from_millis(10),
        reconnect_max_backoff: Duration::from_millis(50),
        ..Config::default()
    };
    let controller = Controller::spawn(config, unreachable_client()?);

    let (first, hello) = common::next_hello(&mut attaches).await?;
    assert_eq!(
        (hello.name.as_str(), hello.groups.as_slice()),
        ("edgecontroller", &["resource".to_owned()][..])
    );
    // Cloudhub ends the stream: the controller attaches again and says hello again.
    drop(first);
    let (mut second, _) = common::next_hello(&mut attaches).await?;

    second
        .send(hub_frame::Frame::Session(NodeSession {
            node: "edge-1".into(),
            connected: true,
            inventory: None,
            cloudhub: "fake".into(),
        }))
        .await?;
    // The API server is unreachable: the answer is an error naming the failed call.
    let object = json!({ "metadata": { "name": "edge-1" } });
    let answer = second
        .ask(
            "edge-1",
            msg(
                Operation::Insert,
                "node/edge-1/_/node/edge-1".into(),
                object,
            ),
        )
        .await?;
    assert_eq!(answer.operation()?, Operation::Error);
    assert!(
        reason(&answer).contains("API server"),
        "{}",
        reason(&answer)
    );

    // Answers from the edge to downstream messages are not answered; the next request is.
    let ack = verge_proto::Message::reply(
        "a-1",
        "down-1",
        "metamanager",
        verge_core::Group::Resource,
        Operation::Ack,
        "",
        vec![],
    );
    second
        .send(hub_frame::Frame::Message(verge_proto::hub::Routed {
            node: "edge-1".into(),
            message: Some(ack),
        }))
        .await?;
    let bad = msg(
        Operation::Update,
        "node/edge-1/default/configmap/c".into(),
        json!({}),
    );
    let answer = second.ask("edge-1", bad).await?;
    assert!(
        reason(&answer).contains("unsupported"),
        "{}",
        reason(&answer)
    );

    controller.stop().await?;
    Ok(())
}

/// Two replicas: the controller attaches to both, and answers each upstream message on the
/// stream it came from, whichever replica announced the node.
#[tokio::test]
async fn attaches_to_every_replica_and_answers_on_the_origin() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let (addr1, mut attaches1) = common::start().await?;
    let (addr2, mut attaches2) = common::start().await?;
    let config = Config {
        cloudhub: vec![format!("https://{addr1}"), format!("https://{addr2}")],
        cloudhub_auth: common::hub_auth(),
        leader_election: common::no_leader_election(),
        reconnect_min_backoff: Duration::from_millis(10),
        reconnect_max_backoff: Duration::from_millis(50),
        ..Config::default()
    };
    let controller = Controller::spawn(config, unreachable_client()?);
    let (mut hub1, _) = common::next_hello(&mut attaches1).await?;
    let (mut hub2, _) = common::next_hello(&mut attaches2).await?;
    hub2.send(hub_frame::Frame::Session(NodeSession {
        node: "edge-1".into(),
        connected: true,
        inventory: None,
        cloudhub: "hub-2".into(),
    }))
    .await?;
    let unsupported = || {
        msg(
            Operation::Update,
            "node/edge-1/default/configmap/c".into(),
            json!({}),
        )
    };
    // A message that came through hub-1 (e.g. sent before the node moved) is answered there.
    let answer = hub1.ask("edge-1", unsupported()).await?;
    assert_eq!(answer.operation()?, Operation::Error);
    let answer = hub2.ask("edge-1", unsupported()).await?;
    assert_eq!(answer.operation()?, Operation::Error);

    // hub-1's stream ends: it is re-attached on its own; hub-2's stream is unaffected.
    drop(hub1);
    let (_hub1, _) = common::next_hello(&mut attaches1).await?;
    let answer = hub2.ask("edge-1", unsupported()).await?;
    assert!(
        reason(&answer).contains("unsupported"),
        "{}",
        reason(&answer)
    );

    controller.stop().await?;
    Ok(())
}
