//! Component test: edgecore against an in-test fake of cloudhub's `EdgeHub` service on
//! 127.0.0.1:0. Checks the hello, node registration/status/lease, downstream storage and
//! acks, stale versions, and reconnects (stream dropped; cloudhub silent).

use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use verge_core::{Group, Operation, ResourceKey, ResourceType};
use verge_edgecore::{Config, EdgeCore};
use verge_proto::hub::edge_hub_server::{EdgeHub, EdgeHubServer};
use verge_proto::hub::{CloudFrame, EdgeFrame, EdgeHello, Welcome, cloud_frame, edge_frame};
use verge_proto::{Message, MessageExt};

const STEP: Duration = Duration::from_secs(10);
const KEEPALIVE_MS: u64 = 200;

/// What the fake saw.
#[derive(Debug)]
enum Event {
    Hello(EdgeHello, SessionCtl),
    Keepalive,
    Msg(Message),
}

/// Controls one session of the fake: send frames down, or end the stream.
#[derive(Debug, Clone)]
struct SessionCtl {
    tx: mpsc::Sender<Result<CloudFrame, Status>>,
    kill: CancellationToken,
}

impl SessionCtl {
    async fn send(&self, msg: Message) -> Result<()> {
        let frame = CloudFrame {
            frame: Some(cloud_frame::Frame::Message(msg)),
        };
        self.tx.send(Ok(frame)).await.context("session gone")
    }
}

struct FakeHub {
    events: mpsc::UnboundedSender<Event>,
    answer_keepalives: bool,
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<CloudFrame, Status>> + Send>>;

#[tonic::async_trait]
impl EdgeHub for FakeHub {
    type ConnectStream = FrameStream;

    async fn connect(
        &self,
        request: Request<Streaming<EdgeFrame>>,
    ) -> Result<Response<FrameStream>, Status> {
        let mut inbound = request.into_inner();
        let Some(EdgeFrame {
            frame: Some(edge_frame::Frame::Hello(hello)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument("first frame must be a hello"));
        };
        let (tx, rx) = mpsc::channel(64);
        let kill = CancellationToken::new();
        let welcome = Welcome {
            session_id: uuid_like(),
            keepalive_interval_ms: KEEPALIVE_MS,
            max_frame_bytes: 4 << 20,
        };
        tx.send(Ok(CloudFrame {
            frame: Some(cloud_frame::Frame::Welcome(welcome)),
        }))
        .await
        .map_err(|_| Status::internal("closed"))?;
        let ctl = SessionCtl {
            tx: tx.clone(),
            kill: kill.clone(),
        };
        let _ = self.events.send(Event::Hello(hello, ctl));
        let (events, answer) = (self.events.clone(), self.answer_keepalives);
        tokio::spawn(async move {
            while let Some(Ok(frame)) = inbound.next().await {
                let Some(edge_frame::Frame::Message(msg)) = frame.frame else {
                    continue;
                };
                if msg.operation() == Ok(Operation::Keepalive) {
                    let _ = events.send(Event::Keepalive);
                    if answer {
                        let pong = Message::build(
                            "k",
                            "cloudhub",
                            Group::Hub,
                            Operation::Keepalive,
                            "",
                            Vec::new(),
                        );
                        let _ = tx
                            .send(Ok(CloudFrame {
                                frame: Some(cloud_frame::Frame::Message(pong)),
                            }))
                            .await;
                    }
                } else {
                    let _ = events.send(Event::Msg(msg));
                }
            }
        });
        let stream = ReceiverStream::new(rx).take_until(kill.cancelled_owned());
        Ok(Response::new(Box::pin(stream)))
    }
}

fn uuid_like() -> String {
    format!("session-{}", std::process::id())
}

/// Starts the fake on 127.0.0.1:0; returns its URL and the event stream.
async fn start_fake(answer_keepalives: bool) -> Result<(String, mpsc::UnboundedReceiver<Event>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (events, rx) = mpsc::unbounded_channel();
    let service = EdgeHubServer::new(FakeHub {
        events,
        answer_keepalives,
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Ok((format!("http://{addr}"), rx))
}

fn config(cloudhub: String, dir: &std::path::Path) -> Config {
    Config {
        node_name: "edge-test".into(),
        cloudhub,
        data_dir: dir.to_owned(),
        node_status_update_frequency: Duration::from_millis(200),
        node_lease_renew_interval: Duration::from_millis(200),
        reconnect_initial_backoff: Duration::from_millis(100),
        reconnect_max_backoff: Duration::from_millis(400),
        connect_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

async fn next_hello(
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<(EdgeHello, SessionCtl)> {
    tokio::time::timeout(STEP, async {
        loop {
            match events.recv().await {
                Some(Event::Hello(h, ctl)) => return Ok((h, ctl)),
                Some(_) => {}
                None => bail!("fake stopped"),
            }
        }
    })
    .await
    .context("no hello in time")?
}

/// The next upstream message matching `pred`, skipping others.
async fn next_msg(
    events: &mut mpsc::UnboundedReceiver<Event>,
    what: &str,
    pred: impl Fn(&Message) -> bool,
) -> Result<Message> {
    tokio::time::timeout(STEP, async {
        loop {
            match events.recv().await {
                Some(Event::Msg(m)) if pred(&m) => return Ok(m),
                Some(Event::Hello(..)) => bail!("unexpected reconnect while waiting for {what}"),
                Some(_) => {}
                None => bail!("fake stopped"),
            }
        }
    })
    .await
    .with_context(|| format!("no {what} in time"))?
}

fn is(op: Operation, resource: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.operation() == Ok(op) && m.resource() == resource
}

fn answer_to(op: Operation, parent: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.operation() == Ok(op) && m.parent_id() == parent
}

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
    let status = next_msg(
        &mut events,
        "node status",
        is(Operation::Update, "_/nodestatus/edge-test"),
    )
    .await?;
    let status: serde_json::Value = serde_json::from_slice(&status.content)?;
    assert_eq!(status["capacity"]["pods"], "110");
    let lease = next_msg(
        &mut events,
        "lease",
        is(Operation::Update, "kube-node-lease/lease/edge-test"),
    )
    .await?;
    let lease: serde_json::Value = serde_json::from_slice(&lease.content)?;
    assert_eq!(lease["spec"]["holderIdentity"], "edge-test");
    // Periodic: a second status arrives.
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
