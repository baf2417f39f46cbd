//! Helpers for cloudhub component tests: a real cloudhub on loopback port 0, real tonic
//! clients for edges and controllers, every wait bounded.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code, clippy::unwrap_used)]

pub mod cluster;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Status, Streaming};
use verge_cloudhub::trust::Trust;
use verge_cloudhub::{CloudHub, Config, Listeners};
use verge_core::{Group, Operation};
use verge_pki::{Ca, ClientIdentity};
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{
    CloudFrame, ControllerFrame, ControllerHello, EdgeFrame, EdgeHello, HubFrame, NodeSession,
    Routed, Welcome, cloud_frame, controller_frame, edge_frame, hub_frame,
};
use verge_proto::{Inventory, InventoryEntry, Message};

/// Upper bound of every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(5);

/// A cloudhub running in this process, with its own CA and a fake cluster.
pub struct Hub {
    pub edge_addr: SocketAddr,
    pub controller_addr: SocketAddr,
    pub join_addr: SocketAddr,
    pub trust: Arc<Trust>,
    pub cluster: Arc<cluster::FakeCluster>,
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
    start_with_health(config, None).await
}

/// [`start`], reporting readiness through `health` when given.
pub async fn start_with_health(
    config: Config,
    health: Option<verge_runtime::health::Health>,
) -> Hub {
    verge_telemetry::init_for_tests();
    let bind = || TcpListener::bind("127.0.0.1:0");
    let listeners = Listeners {
        edge: bind().await.unwrap(),
        controllers: bind().await.unwrap(),
        join: bind().await.unwrap(),
        streams: None,
    };
    let edge_addr = listeners.edge.local_addr().unwrap();
    let controller_addr = listeners.controllers.local_addr().unwrap();
    let join_addr = listeners.join.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let ca = Ca::generate("test-ca", Duration::from_secs(3600)).unwrap();
    let cluster = Arc::new(cluster::FakeCluster::default());
    let trust = Arc::new(Trust::new(ca, cluster.clone(), config.trust.clone()));
    let mut hub = CloudHub::new(config, trust.clone()).unwrap();
    if let Some(health) = health {
        hub = hub.with_health(health);
    }
    let task = tokio::spawn(hub.serve_with_listeners(listeners, shutdown.clone()));
    Hub {
        edge_addr,
        controller_addr,
        join_addr,
        trust,
        cluster,
        shutdown,
        task,
    }
}

/// A node client certificate (chain PEM, key) for `node` from `ca`.
pub fn node_cert(ca: &Ca, node: &str) -> (String, verge_pki::PrivateKeyPem) {
    let issued = ca
        .issue_client(
            &format!("system:node:{node}"),
            Some("system:nodes"),
            Duration::from_secs(600),
        )
        .unwrap();
    (issued.cert_pem.clone(), issued.key_pem.clone())
}

/// A TLS channel to `addr` trusting `hub`'s CA, presenting `identity` when given.
pub async fn tls_channel(
    hub: &Hub,
    addr: SocketAddr,
    identity: Option<(String, verge_pki::PrivateKeyPem)>,
) -> Result<Channel, tonic::transport::Error> {
    let ca_pem = hub.trust.ca().cert_pem().to_owned();
    let identity = identity.as_ref().map(|(cert, key)| ClientIdentity {
        cert_chain_pem: cert,
        key_pem: key,
    });
    let config = verge_pki::tls::client_config(&ca_pem, identity).unwrap();
    let endpoint = verge_proto::transport::endpoint(&format!("https://{addr}")).unwrap();
    verge_proto::transport::connect_tls(endpoint, Arc::new(config), None).await
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

/// An EdgeHub channel with `node`'s certificate.
pub async fn edge_channel(hub: &Hub, node: &str) -> Channel {
    let identity = node_cert(hub.trust.ca(), node);
    tls_channel(hub, hub.edge_addr, Some(identity))
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

pub fn hello(node: &str) -> EdgeFrame {
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
            token: String::new(),
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

/// Opens `EdgeHub.Connect` with `node`'s certificate and sends `first`; returns the call's
/// error, or the stream.
pub async fn open_edge_as(
    hub: &Hub,
    node: &str,
    first: EdgeFrame,
) -> Result<(mpsc::Sender<EdgeFrame>, Streaming<CloudFrame>), Status> {
    let mut client = EdgeHubClient::new(edge_channel(hub, node).await);
    let (tx, rx) = mpsc::channel(16);
    tx.send(first).await.unwrap();
    let response = within("connect", client.connect(ReceiverStream::new(rx))).await?;
    Ok((tx, response.into_inner()))
}

/// Opens `EdgeHub.Connect` as node `edge-cert` and sends `first`.
pub async fn open_edge(
    hub: &Hub,
    first: EdgeFrame,
) -> Result<(mpsc::Sender<EdgeFrame>, Streaming<CloudFrame>), Status> {
    open_edge_as(hub, "edge-cert", first).await
}

/// Connects `node` with its own certificate and reads the welcome.
pub async fn connect(hub: &Hub, node: &str) -> Edge {
    connect_as(hub, node, node).await.unwrap()
}

/// Connects with `cert_node`'s certificate and a hello naming `hello_node`.
pub async fn connect_as(hub: &Hub, cert_node: &str, hello_node: &str) -> Result<Edge, Status> {
    let (tx, mut rx) = open_edge_as(hub, cert_node, hello(hello_node)).await?;
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
    try_attach(hub, name, groups, Some(cluster::CONTROLLER_TOKEN))
        .await
        .unwrap()
}

/// Attaches with `token` as bearer (none: no `authorization`); the call's error or the
/// controller.
pub async fn try_attach(
    hub: &Hub,
    name: &str,
    groups: &[&str],
    token: Option<&str>,
) -> Result<Controller, Status> {
    let channel = tls_channel(hub, hub.controller_addr, None).await.unwrap();
    let mut client = ControllerHubClient::new(channel);
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
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(token) = token {
        let bearer = format!("Bearer {token}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
    }
    let response = within("attach", client.attach(request)).await?;
    Ok(Controller {
        tx,
        rx: response.into_inner(),
    })
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
    let mut grpc = tonic::client::Grpc::new(edge_channel(hub, "edge-raw").await);
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
