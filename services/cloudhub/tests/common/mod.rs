//! Helpers for cloudhub component tests: a real cloudhub on loopback port 0, real tonic
//! clients for edges and controllers, every wait bounded.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};
use verge_cloudhub::{CloudHub, Config};
use verge_core::{Group, Operation};
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{
    CloudFrame, ControllerFrame, ControllerHello, EdgeFrame, EdgeHello, HubFrame, NodeSession,
    Routed, Welcome, cloud_frame, controller_frame, edge_frame, hub_frame,
};
use verge_proto::{Inventory, InventoryEntry, Message};

/// Upper bound of every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(5);

/// A cloudhub running in this process.
pub struct Hub {
    pub edge_addr: SocketAddr,
    pub controller_addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<verge_cloudhub::Result<()>>,
}

/// The test configuration: replica "test-hub", everything else default unless changed.
pub fn config() -> Config {
    Config {
        replica_name: "test-hub".into(),
        ..Config::default()
    }
}

pub async fn start(config: Config) -> Hub {
    verge_telemetry::init_for_tests();
    let edge = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let controllers = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let edge_addr = edge.local_addr().unwrap();
    let controller_addr = controllers.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let hub = CloudHub::new(config).unwrap();
    let task = tokio::spawn(hub.serve_with_listeners(edge, controllers, shutdown.clone()));
    Hub {
        edge_addr,
        controller_addr,
        shutdown,
        task,
    }
}

impl Hub {
    /// Cancels and waits (bounded) for a clean stop.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("stops in time")
            .unwrap()
            .unwrap();
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// An edge node's stream.
pub struct Edge {
    pub tx: mpsc::Sender<EdgeFrame>,
    pub rx: Streaming<CloudFrame>,
    pub welcome: Welcome,
}

pub fn hello(node: &str, token: &str) -> EdgeFrame {
    let entry = InventoryEntry {
        r#type: "pod".into(),
        namespace: "default".into(),
        name: "web".into(),
        uid: "u1".into(),
        resource_version: "7".into(),
    };
    EdgeFrame {
        frame: Some(edge_frame::Frame::Hello(EdgeHello {
            node_name: node.into(),
            token: token.into(),
            inventory: Some(Inventory {
                entries: vec![entry],
            }),
            edgecore_version: "test".into(),
        })),
    }
}

pub fn edge_msg(message: Message) -> EdgeFrame {
    EdgeFrame {
        frame: Some(edge_frame::Frame::Message(message)),
    }
}

/// Opens `EdgeHub.Connect` and sends `first`; returns the call's error, or the stream.
pub async fn open_edge(
    hub: &Hub,
    first: EdgeFrame,
) -> Result<(mpsc::Sender<EdgeFrame>, Streaming<CloudFrame>), Status> {
    let mut client = EdgeHubClient::new(channel(hub.edge_addr).await);
    let (tx, rx) = mpsc::channel(16);
    tx.send(first).await.unwrap();
    let response = within("connect", client.connect(ReceiverStream::new(rx))).await?;
    Ok((tx, response.into_inner()))
}

/// Connects `node` (no token) and reads the welcome.
pub async fn connect(hub: &Hub, node: &str) -> Edge {
    connect_with_token(hub, node, "").await.unwrap()
}

pub async fn connect_with_token(hub: &Hub, node: &str, token: &str) -> Result<Edge, Status> {
    let (tx, mut rx) = open_edge(hub, hello(node, token)).await?;
    let first = within("welcome", rx.message()).await?.expect("a frame");
    let Some(cloud_frame::Frame::Welcome(welcome)) = first.frame else {
        panic!("expected a welcome, got {first:?}");
    };
    Ok(Edge { tx, rx, welcome })
}

impl Edge {
    pub async fn send(&self, message: Message) {
        self.tx.send(edge_msg(message)).await.unwrap();
    }

    /// The next message, or the status the stream ended with.
    pub async fn next(&mut self) -> Result<Message, Status> {
        match within("an edge frame", self.rx.message()).await? {
            Some(CloudFrame {
                frame: Some(cloud_frame::Frame::Message(m)),
            }) => Ok(m),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// The status the stream ends with.
    pub async fn ended(&mut self) -> Status {
        loop {
            match within("the stream end", self.rx.message()).await {
                Err(status) => return status,
                Ok(None) => return Status::ok(""),
                Ok(Some(_)) => {}
            }
        }
    }
}

/// A controller's stream.
pub struct Controller {
    pub tx: mpsc::Sender<ControllerFrame>,
    pub rx: Streaming<HubFrame>,
}

pub async fn attach(hub: &Hub, name: &str, groups: &[&str]) -> Controller {
    let mut client = ControllerHubClient::new(channel(hub.controller_addr).await);
    let (tx, rx) = mpsc::channel(16);
    let hello = ControllerHello {
        name: name.into(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
    };
    tx.send(ControllerFrame {
        frame: Some(controller_frame::Frame::Hello(hello)),
    })
    .await
    .unwrap();
    let response = within("attach", client.attach(ReceiverStream::new(rx)))
        .await
        .unwrap();
    Controller {
        tx,
        rx: response.into_inner(),
    }
}

impl Controller {
    pub async fn send(&self, node: &str, message: Message) {
        let routed = Routed {
            node: node.into(),
            message: Some(message),
        };
        self.tx
            .send(ControllerFrame {
                frame: Some(controller_frame::Frame::Message(routed)),
            })
            .await
            .unwrap();
    }

    pub async fn next(&mut self) -> hub_frame::Frame {
        let frame = within("a hub frame", self.rx.message())
            .await
            .unwrap()
            .expect("stream open");
        frame.frame.expect("frame set")
    }

    pub async fn session(&mut self) -> NodeSession {
        match self.next().await {
            hub_frame::Frame::Session(s) => s,
            other => panic!("expected a session event, got {other:?}"),
        }
    }

    pub async fn message(&mut self) -> Routed {
        match self.next().await {
            hub_frame::Frame::Message(m) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// An edge -> cloud message of group `resource`.
pub fn update(id: &str, resource: &str) -> Message {
    Message::build(
        id,
        "edged",
        Group::Resource,
        Operation::Update,
        resource,
        b"{}".to_vec(),
    )
}

pub fn keepalive(id: &str) -> Message {
    Message::build(
        id,
        "edgehub",
        Group::Hub,
        Operation::Keepalive,
        "",
        Vec::new(),
    )
}

/// A codec that sends pre-encoded (possibly invalid) frames and decodes `CloudFrame`s, so a
/// test can put arbitrary bytes on the wire through a real gRPC client.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = CloudFrame;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = CloudFrame;
    type Error = Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<CloudFrame>, Status> {
        prost::Message::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// Opens `EdgeHub.Connect` and sends `frames` as raw bytes.
pub async fn open_raw_edge(
    hub: &Hub,
    frames: Vec<Vec<u8>>,
) -> Result<Streaming<CloudFrame>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel(hub.edge_addr).await);
    within("ready", grpc.ready()).await.unwrap();
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/verge.hub.v1.EdgeHub/Connect");
    // Keep the request stream open so the session is not closed by a half-close.
    let body =
        tokio_stream::StreamExt::chain(tokio_stream::iter(frames), futures::stream::pending());
    let response = within(
        "connect",
        grpc.streaming(tonic::Request::new(body), path, RawCodec),
    )
    .await?;
    Ok(response.into_inner())
}
