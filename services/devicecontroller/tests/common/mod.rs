//! An in-test ControllerHub (a fake of our own service, playing cloudhub) for component
//! tests, and the hub stream as a test sees it: answers and downstream messages apart.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};
use verge_controller::config::LeaderElectionConfig;
use verge_devicecontroller::config::HubAuthConfig;
use verge_devicecontroller::{Config, DeviceController};
use verge_pki::Ca;
use verge_proto::hub::controller_hub_server::{ControllerHub, ControllerHubServer};
use verge_proto::hub::{
    ControllerFrame, ControllerHello, HubFrame, NodeSession, Routed, controller_frame, hub_frame,
};
use verge_proto::{Inventory, Message, MessageExt};

type HubStream = ReceiverStream<Result<HubFrame, Status>>;

/// How long a step waits for an expected frame.
pub const WAIT: Duration = Duration::from_secs(30);

/// The bearer token the fake accepts (what [`hub_auth`]'s token file holds).
pub const TEST_TOKEN: &str = "test-controller-token";

/// Hands every accepted `Attach` stream to the test.
struct FakeHub {
    attaches: mpsc::Sender<Hub>,
}

#[tonic::async_trait]
impl ControllerHub for FakeHub {
    type AttachStream = HubStream;

    async fn attach(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<HubStream>, Status> {
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if bearer.as_deref() != Some(&format!("Bearer {TEST_TOKEN}")) {
            return Err(Status::unauthenticated("no or wrong bearer token"));
        }
        let (tx, rx) = mpsc::channel(64);
        let hub = Hub {
            to_controller: tx,
            from_controller: request.into_inner(),
            pending: VecDeque::new(),
        };
        self.attaches
            .send(hub)
            .await
            .map_err(|_| Status::unavailable("test ended"))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

fn test_ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| {
        Ca::generate("devicecontroller-tests", Duration::from_secs(3600)).expect("CA")
    })
}

/// `cloudhubAuth` for the fake: its CA and [`TEST_TOKEN`] from files.
pub fn hub_auth() -> HubAuthConfig {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.crt"), test_ca().cert_pem()).expect("ca file");
        std::fs::write(dir.path().join("token"), TEST_TOKEN).expect("token file");
        dir
    });
    HubAuthConfig {
        ca_file: Some(dir.path().join("ca.crt")),
        token_file: Some(dir.path().join("token")),
        ..HubAuthConfig::default()
    }
}

/// Starts the fake (TLS) on a free loopback port; returns its address and the streams.
pub async fn start() -> anyhow::Result<(SocketAddr, mpsc::Receiver<Hub>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(4);
    let serving = test_ca().issue_serving(
        "cloudhub",
        &["127.0.0.1".to_owned()],
        Duration::from_secs(3600),
    )?;
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(
        serving.chain_pem(),
        serving.key_pem.expose(),
    ));
    tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)?
            .add_service(ControllerHubServer::new(FakeHub { attaches: tx }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Ok((addr, rx))
}

/// Waits for the next attached stream and reads its hello.
pub async fn next_hello(
    attaches: &mut mpsc::Receiver<Hub>,
) -> anyhow::Result<(Hub, ControllerHello)> {
    let mut hub = tokio::time::timeout(WAIT, attaches.recv())
        .await
        .context("no attach in time")?
        .context("fake hub stopped")?;
    let controller_frame::Frame::Hello(hello) = hub.next().await? else {
        bail!("no hello")
    };
    Ok((hub, hello))
}

/// A [`DeviceController`] running in a task of the test.
pub struct Controller {
    shutdown: CancellationToken,
    task: JoinHandle<verge_devicecontroller::Result<()>>,
}

impl Controller {
    /// Spawns `DeviceController::run` with `config` and `client`.
    pub fn spawn(config: Config, client: kube::Client) -> Self {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(DeviceController::new(config, client).run(shutdown.clone()));
        Self { shutdown, task }
    }

    /// Shuts the controller down; fails unless it returns `Ok` within 10 s.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task).await???;
        Ok(())
    }
}

/// One attached controller stream, seen from cloudhub's side, with the downstream messages
/// that arrived while the test waited for something else.
pub struct Hub {
    to_controller: mpsc::Sender<Result<HubFrame, Status>>,
    from_controller: Streaming<ControllerFrame>,
    pending: VecDeque<(String, Message)>,
}

impl Hub {
    /// Sends one frame to the controller.
    pub async fn send(&self, frame: hub_frame::Frame) -> anyhow::Result<()> {
        self.to_controller
            .send(Ok(HubFrame { frame: Some(frame) }))
            .await?;
        Ok(())
    }

    /// Announces `node` connected with `inventory`.
    pub async fn connect(&self, node: &str, inventory: Inventory) -> anyhow::Result<()> {
        self.send(hub_frame::Frame::Session(NodeSession {
            node: node.into(),
            connected: true,
            inventory: Some(inventory),
            cloudhub: "fake".into(),
        }))
        .await
    }

    /// The next frame from the controller ([`WAIT`] timeout).
    pub async fn next(&mut self) -> anyhow::Result<controller_frame::Frame> {
        let frame = tokio::time::timeout(WAIT, self.from_controller.message())
            .await
            .context("no frame from the controller in time")??
            .context("controller stream ended")?;
        frame.frame.context("empty frame")
    }

    /// The next message (node, message) from the controller within `wait`, or `None`.
    async fn next_message(&mut self, wait: Duration) -> anyhow::Result<Option<(String, Message)>> {
        let frame = match tokio::time::timeout(wait, self.from_controller.message()).await {
            Err(_) => return Ok(None),
            Ok(frame) => frame?.context("controller stream ended")?,
        };
        match frame.frame {
            Some(controller_frame::Frame::Message(Routed {
                node,
                message: Some(m),
            })) => Ok(Some((node, m))),
            other => bail!("unexpected frame {other:?}"),
        }
    }

    /// Sends `message` from `node` and returns the controller's answer to it, keeping the
    /// downstream messages that arrive meanwhile.
    pub async fn ask(&mut self, node: &str, message: Message) -> anyhow::Result<Message> {
        let id = message.id().to_owned();
        self.send(hub_frame::Frame::Message(Routed {
            node: node.into(),
            message: Some(message),
        }))
        .await?;
        loop {
            let (n, m) = self
                .next_message(WAIT)
                .await?
                .context("no answer in time")?;
            if m.parent_id() == id {
                anyhow::ensure!(n == node, "answer routed to {n}, not {node}");
                return Ok(m);
            }
            self.pending.push_back((n, m));
        }
    }

    /// Waits (at most [`WAIT`]) for a downstream message to `node` that `wanted` accepts and
    /// returns it; others stay pending.
    pub async fn expect(
        &mut self,
        node: &str,
        what: &str,
        wanted: impl Fn(&Message) -> bool,
    ) -> anyhow::Result<Message> {
        if let Some(i) = self
            .pending
            .iter()
            .position(|(n, m)| n == node && wanted(m))
        {
            return self.pending.remove(i).map(|(_, m)| m).context("pending");
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some((n, m)) = self.next_message(left).await? else {
                bail!(
                    "no {what} for {node} in time; pending: {:?}",
                    self.summary()
                );
            };
            if n == node && wanted(&m) {
                return Ok(m);
            }
            self.pending.push_back((n, m));
        }
    }

    /// Drops the pending downstream messages.
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// (node, operation, resource) of the pending messages, for failure messages.
    pub fn summary(&self) -> Vec<(String, String, String)> {
        self.pending
            .iter()
            .map(|(n, m)| {
                let op = m.operation().map(|o| o.to_string()).unwrap_or_default();
                (n.clone(), op, m.resource().to_owned())
            })
            .collect()
    }
}

/// The UTF-8 content of an answer.
pub fn reason(m: &Message) -> String {
    String::from_utf8_lossy(&m.content).into_owned()
}

/// No leader election: for tests without an API server.
pub fn no_leader_election() -> LeaderElectionConfig {
    LeaderElectionConfig {
        leader_elect: false,
        ..LeaderElectionConfig::default()
    }
}
