//! An in-test ControllerHub (a fake of our own service, playing cloudhub) for component tests.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

pub mod probe;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};
use verge_controller::config::LeaderElectionConfig;
use verge_controller::leader::Leadership;
use verge_core::{Group, Operation};
use verge_edgecontroller::config::HubAuthConfig;
use verge_edgecontroller::{Config, EdgeController};
use verge_pki::Ca;
use verge_proto::hub::controller_hub_server::{ControllerHub, ControllerHubServer};
use verge_proto::hub::{
    ControllerFrame, ControllerHello, HubFrame, Routed, controller_frame, hub_frame,
};
use verge_proto::{Message, MessageExt};

type HubStream = ReceiverStream<Result<HubFrame, Status>>;

/// Hands every accepted `Attach` stream to the test.
struct FakeHub {
    attaches: mpsc::Sender<Attach>,
}

#[tonic::async_trait]
impl ControllerHub for FakeHub {
    type AttachStream = HubStream;

    async fn attach(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<HubStream>, Status> {
        // Like cloudhub: a bearer token is required (its TokenReview is cloudhub's business).
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if bearer.as_deref() != Some(&format!("Bearer {TEST_TOKEN}")) {
            return Err(Status::unauthenticated("no or wrong bearer token"));
        }
        let (tx, rx) = mpsc::channel(64);
        let attach = Attach {
            to_controller: tx,
            from_controller: request.into_inner(),
        };
        self.attaches
            .send(attach)
            .await
            .map_err(|_| Status::unavailable("test ended"))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The bearer token the fake accepts (what [`hub_auth`]'s token file holds).
pub const TEST_TOKEN: &str = "test-controller-token";

/// The CA of the fake's serving certificate (one per test process).
fn test_ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| Ca::generate("edgecontroller-tests", Duration::from_secs(3600)).expect("CA"))
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

/// Starts the fake (TLS with a certificate from [`test_ca`]) on a free loopback port;
/// returns its address and the accepted streams.
pub async fn start() -> anyhow::Result<(SocketAddr, mpsc::Receiver<Attach>)> {
    start_serving(&[]).await
}

/// [`start`] with a certificate valid for `127.0.0.1` and `names` too.
pub async fn start_serving(names: &[&str]) -> anyhow::Result<(SocketAddr, mpsc::Receiver<Attach>)> {
    start_on(std::net::Ipv4Addr::LOCALHOST.into(), names).await
}

/// [`start_serving`] listening on `ip` (a free port).
pub async fn start_on(
    ip: std::net::IpAddr,
    names: &[&str],
) -> anyhow::Result<(SocketAddr, mpsc::Receiver<Attach>)> {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(4);
    let mut sans = vec!["127.0.0.1".to_owned()];
    sans.extend(names.iter().map(|n| (*n).to_owned()));
    let serving = test_ca().issue_serving("cloudhub", &sans, Duration::from_secs(3600))?;
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

/// Waits up to 30 s for the next attached stream.
pub async fn next_attach(attaches: &mut mpsc::Receiver<Attach>) -> anyhow::Result<Attach> {
    tokio::time::timeout(Duration::from_secs(30), attaches.recv())
        .await
        .context("no attach within 30s")?
        .context("fake hub stopped")
}

/// Waits up to 30 s for the next attached stream and reads its first frame, which must be
/// the controller's hello.
pub async fn next_hello(
    attaches: &mut mpsc::Receiver<Attach>,
) -> anyhow::Result<(Attach, ControllerHello)> {
    let mut attach = next_attach(attaches).await?;
    let controller_frame::Frame::Hello(hello) = attach.next().await? else {
        bail!("no hello")
    };
    Ok((attach, hello))
}

/// An [`EdgeController`] running in a task of the test.
pub struct Controller {
    /// Its leadership.
    pub leadership: Leadership,
    shutdown: CancellationToken,
    task: JoinHandle<verge_edgecontroller::Result<()>>,
}

impl Controller {
    /// Spawns `EdgeController::run` with `config` and `client`.
    pub fn spawn(config: Config, client: kube::Client) -> Self {
        let shutdown = CancellationToken::new();
        let controller = EdgeController::new(config, client);
        let leadership = controller.leadership();
        let task = tokio::spawn(controller.run(shutdown.clone()));
        Self {
            leadership,
            shutdown,
            task,
        }
    }

    /// Waits up to `wait` for the controller to end on its own; its result.
    pub async fn ended(self, wait: Duration) -> anyhow::Result<verge_edgecontroller::Result<()>> {
        Ok(tokio::time::timeout(wait, self.task)
            .await
            .context("the controller did not end")??)
    }

    /// Shuts the controller down; fails unless it returns `Ok` within 10 s.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task).await???;
        Ok(())
    }
}

/// One attached controller stream, seen from cloudhub's side.
pub struct Attach {
    /// Frames to the controller; dropping it ends the stream.
    pub to_controller: mpsc::Sender<Result<HubFrame, Status>>,
    /// Frames from the controller.
    pub from_controller: Streaming<ControllerFrame>,
}

impl Attach {
    /// Sends one frame to the controller.
    pub async fn send(&self, frame: hub_frame::Frame) -> anyhow::Result<()> {
        self.to_controller
            .send(Ok(HubFrame { frame: Some(frame) }))
            .await?;
        Ok(())
    }

    /// The next frame from the controller (30 s timeout).
    pub async fn next(&mut self) -> anyhow::Result<controller_frame::Frame> {
        let frame = tokio::time::timeout(Duration::from_secs(30), self.from_controller.message())
            .await
            .context("no frame from the controller within 30s")??
            .context("controller stream ended")?;
        frame.frame.context("empty frame")
    }

    /// Sends `message` from `node` and returns the controller's answer to it, skipping
    /// downstream messages (without `parent_id`, e.g. the `resync` marker) meanwhile.
    pub async fn ask(&mut self, node: &str, message: Message) -> anyhow::Result<Message> {
        let id = message.id().to_owned();
        self.send(hub_frame::Frame::Message(Routed {
            node: node.into(),
            message: Some(message),
        }))
        .await?;
        loop {
            match self.next().await? {
                controller_frame::Frame::Message(Routed {
                    node: n,
                    message: Some(m),
                }) if m.parent_id() == id => {
                    ensure!(n == node, "answer routed to {n}, not {node}");
                    return Ok(m);
                }
                controller_frame::Frame::Message(Routed {
                    message: Some(m), ..
                }) if m.parent_id().is_empty() => {
                    tracing::debug!(resource = %m.resource(), "downstream message skipped");
                }
                other => bail!("unexpected frame {other:?}"),
            }
        }
    }
}

/// An upstream message from edged with a fresh id.
pub fn msg(op: Operation, resource: String, content: serde_json::Value) -> Message {
    let id = uuid::Uuid::new_v4().to_string();
    Message::build(
        id,
        "edged",
        Group::Resource,
        op,
        resource,
        content.to_string().into_bytes(),
    )
}

/// The UTF-8 content of an answer.
pub fn reason(m: &Message) -> String {
    String::from_utf8_lossy(&m.content).into_owned()
}

/// Sends node `node`'s registration of `object` (its `v1.Node`) and checks it is acked; first
/// creates the Node as a join does ([`create_joined_node`]) unless it exists.
///
/// # Errors
/// No answer, or an answer other than `ack` (its reason in the error).
pub async fn register(h: &mut Attach, node: &str, object: serde_json::Value) -> anyhow::Result<()> {
    let client = verge_testkit::shared().await?.client().await?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    if nodes.get_opt(node).await?.is_none() {
        create_joined_node(&nodes, node, &[]).await?;
    }
    let path = format!("node/{node}/_/node/{node}");
    let answer = h.ask(node, msg(Operation::Insert, path, object)).await?;
    anyhow::ensure!(
        answer.operation()? == Operation::Ack,
        "registration of {node} not acked: {}",
        reason(&answer)
    );
    Ok(())
}

/// Leader election on a Lease of this test's own (`<controller>-<test>-<random>` in
/// `verge-system`, created if absent): tests share one control plane and must not wait for
/// each other's leases.
pub async fn leader_election(
    client: &kube::Client,
    test: &str,
) -> anyhow::Result<LeaderElectionConfig> {
    verge_testkit::trust::ensure_controller_accounts(client).await?;
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    Ok(LeaderElectionConfig {
        lease_name: Some(format!("edgecontroller-{test}-{id}")),
        ..LeaderElectionConfig::default()
    })
}

/// An edgecontroller attached to a fake cloudhub of its own: what most component tests
/// start with.
pub struct Attached {
    /// A client of the kit's shared control plane.
    pub client: kube::Client,
    /// The running controller.
    pub controller: Controller,
    /// Its attach stream, after the hello.
    pub hub: Attach,
    /// Its hello.
    pub hello: ControllerHello,
    /// Its leader election (a Lease of the test's own, deleted with [`delete_lease`]).
    pub election: LeaderElectionConfig,
}

/// Starts test telemetry, the kit's shared control plane, a fake cloudhub and an
/// edgecontroller (default configuration, a leader Lease named after `test`) attached to it;
/// returns once its hello arrived.
///
/// # Errors
/// The control plane, the fake hub, the Lease set-up or the attach failing.
pub async fn attached(test: &str) -> anyhow::Result<Attached> {
    attached_with(test, |_| {}).await
}

/// [`attached`] with the controller's configuration changed by `configure` first.
pub async fn attached_with(
    test: &str,
    configure: impl FnOnce(&mut Config),
) -> anyhow::Result<Attached> {
    verge_telemetry::init_for_tests();
    let client = verge_testkit::shared().await?.client().await?;
    let (addr, mut attaches) = start().await?;
    let election = leader_election(&client, test).await?;
    let mut config = Config {
        cloudhub: vec![format!("https://{addr}")],
        cloudhub_auth: hub_auth(),
        leader_election: election.clone(),
        ..Config::default()
    };
    configure(&mut config);
    let controller = Controller::spawn(config, client.clone());
    let (hub, hello) = next_hello(&mut attaches).await?;
    Ok(Attached {
        client,
        controller,
        hub,
        hello,
        election,
    })
}

/// Deletes the Lease of `election` (a test's own), ignoring errors.
pub async fn delete_lease(client: &kube::Client, election: &LeaderElectionConfig) {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &election.lease_namespace);
    if let Some(name) = &election.lease_name {
        let _ = leases.delete(name, &Default::default()).await;
    }
}

/// No leader election: for tests without an API server.
pub fn no_leader_election() -> LeaderElectionConfig {
    LeaderElectionConfig {
        leader_elect: false,
        ..LeaderElectionConfig::default()
    }
}

/// Creates Node `node` as cloudhub does when a node joins: the edge label and `taints`
/// (`(key, value)`, effect `NoSchedule`); registration then only merges labels.
pub async fn create_joined_node(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    node: &str,
    taints: &[(&str, &str)],
) -> anyhow::Result<()> {
    let taints: Vec<serde_json::Value> = taints
        .iter()
        .map(|(k, v)| serde_json::json!({ "key": k, "value": v, "effect": "NoSchedule" }))
        .collect();
    let object = serde_json::from_value(serde_json::json!({
        "metadata": { "name": node, "labels": { verge_core::EDGE_NODE_LABEL: "" } },
        "spec": { "taints": taints },
    }))?;
    nodes
        .create(&kube::api::PostParams::default(), &object)
        .await?;
    Ok(())
}
