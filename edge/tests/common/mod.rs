//! An in-test fake of cloudhub's `EdgeHub` service on 127.0.0.1:0 (our own service, so a
//! fake is allowed) and helpers to wait for what edgecore sends it.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};
use verge_core::{Group, Operation};
use verge_edgecore::Config;
use verge_edgecore::certificates::Credentials;
use verge_pki::{Ca, CsrRequest};
use verge_proto::hub::edge_hub_server::{EdgeHub, EdgeHubServer};
use verge_proto::hub::{
    CloudFrame, EdgeFrame, EdgeHello, RenewRequest, RenewResponse, ServingCertificateRequest,
    ServingCertificateResponse, TunnelFrame, Welcome, cloud_frame, edge_frame,
};
use verge_proto::{Message, MessageExt};

pub const STEP: Duration = Duration::from_secs(10);
pub const KEEPALIVE_MS: u64 = 200;

/// What the fake saw.
#[derive(Debug)]
pub enum Event {
    Hello(EdgeHello, SessionCtl),
    Keepalive,
    Msg(Message),
}

/// Controls one session of the fake: send frames down, or end the stream.
#[derive(Debug, Clone)]
pub struct SessionCtl {
    pub tx: mpsc::Sender<Result<CloudFrame, Status>>,
    pub kill: CancellationToken,
}

impl SessionCtl {
    pub async fn send(&self, msg: Message) -> Result<()> {
        let frame = CloudFrame {
            frame: Some(cloud_frame::Frame::Message(msg)),
        };
        self.tx.send(Ok(frame)).await.context("session gone")
    }
}

pub struct FakeHub {
    events: mpsc::UnboundedSender<Event>,
    answer_keepalives: bool,
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<CloudFrame, Status>> + Send>>;

#[tonic::async_trait]
impl EdgeHub for FakeHub {
    type ConnectStream = FrameStream;
    type TunnelStream = Pin<Box<dyn Stream<Item = Result<TunnelFrame, Status>> + Send>>;

    async fn tunnel(
        &self,
        _request: Request<Streaming<TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        Err(Status::unimplemented("the fake cloudhub opens no tunnels"))
    }

    type DialStream = Pin<Box<dyn Stream<Item = Result<TunnelFrame, Status>> + Send>>;

    async fn dial(
        &self,
        _request: Request<Streaming<TunnelFrame>>,
    ) -> Result<Response<Self::DialStream>, Status> {
        Err(Status::unimplemented("the fake cloudhub dials nothing"))
    }

    async fn serving_certificate(
        &self,
        _request: Request<ServingCertificateRequest>,
    ) -> Result<Response<ServingCertificateResponse>, Status> {
        Err(Status::unimplemented(
            "the fake cloudhub issues no serving certificates",
        ))
    }

    /// Signs the CSR with [`test_ca`], like cloudhub (without the CSR API).
    async fn renew_certificate(
        &self,
        request: Request<RenewRequest>,
    ) -> Result<Response<RenewResponse>, Status> {
        let csr = CsrRequest::parse(&request.get_ref().csr)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let certificate = test_ca()
            .sign_client_csr(&csr, Duration::from_secs(7200))
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(RenewResponse {
            certificate,
            csr_name: "fake-renewal".into(),
        }))
    }

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
            kubelet_clients: None,
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
pub async fn start_fake(
    answer_keepalives: bool,
) -> Result<(String, mpsc::UnboundedReceiver<Event>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (events, rx) = mpsc::unbounded_channel();
    let service = EdgeHubServer::new(FakeHub {
        events,
        answer_keepalives,
    });
    // Mutual TLS like cloudhub: the serving certificate and the node's from the test CA.
    let serving = test_ca().issue_serving(
        "cloudhub",
        &["127.0.0.1".to_owned()],
        Duration::from_secs(3600),
    )?;
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            serving.chain_pem(),
            serving.key_pem.expose(),
        ))
        .client_ca_root(Certificate::from_pem(test_ca().cert_pem()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)?
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Ok((format!("https://{addr}"), rx))
}

/// The CA of these tests (one per test process).
pub fn test_ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| Ca::generate("edge-tests", Duration::from_secs(24 * 3600)).expect("test CA"))
}

/// Stores a node certificate for `node` from [`test_ca`] in `config`'s credentials
/// directory, as `edgecore join` would.
pub fn write_credentials(config: &Config) -> Result<()> {
    let issued = test_ca().issue_client(
        &format!("system:node:{}", config.node_name),
        Some("system:nodes"),
        Duration::from_secs(3600),
    )?;
    Credentials::of(&config.hub_settings()).store(
        &issued.key_pem,
        &issued.cert_pem,
        test_ca().cert_pem(),
    )?;
    Ok(())
}

pub fn config(cloudhub: String, dir: &std::path::Path) -> Config {
    let mut config = Config {
        node_name: "edge-test".into(),
        data_dir: dir.to_owned(),
        ..Config::default()
    };
    let hub = &mut config.edge_hub;
    hub.server = cloudhub;
    hub.reconnect_initial_backoff = Duration::from_millis(100);
    hub.reconnect_max_backoff = Duration::from_millis(400);
    hub.connect_timeout = Duration::from_secs(2);
    config.edged.node_status_update_frequency = Duration::from_millis(200);
    // An unchanged status is sent again after this (the default waits 5 minutes).
    config.edged.node_status_report_frequency = Duration::from_millis(400);
    // One DMI socket per edge: tests run edges side by side.
    config.device_twin.dmi_socket = dir.join("dmi.sock");
    // No Service rules on the host for these fake clouds (they send no Services); the
    // Service proxy has tests of its own (service_rules.rs, and the e2e tests). Its table
    // would outlive the test, as kube-proxy's rules outlive kube-proxy.
    config.network.service_proxy = false;
    write_credentials(&config).expect("node credentials");
    config
}

pub async fn next_hello(
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
pub async fn next_msg(
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

pub fn is(op: Operation, resource: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.operation() == Ok(op) && m.resource() == resource
}

pub fn answer_to(op: Operation, parent: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.operation() == Ok(op) && m.parent_id() == parent
}
