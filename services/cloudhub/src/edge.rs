//! The `EdgeHub` service: one session per edge node (KubeEdge: cloudhub's per-node
//! connection handling in `handler/messagehandler.go`).
//!
//! A stream boundary: wire `Message`s from the edge become [`Envelope`]s here (a malformed
//! one ends the stream with `INVALID_ARGUMENT`), and the session's delivery queue is written
//! back as `CloudFrame`s by [`cloud_frame`].

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, instrument, warn};
use verge_core::{Envelope, Group};
use verge_proto::Message;
use verge_proto::hub::edge_hub_server::EdgeHub;
use verge_proto::hub::{
    CloudFrame, EdgeFrame, EdgeHello, RenewRequest, RenewResponse, ServingCertificateRequest,
    ServingCertificateResponse, TunnelFrame, Welcome, cloud_frame, edge_frame, tunnel_frame,
};

use crate::metrics::{self, Direction};
use crate::routing::{self, Upstream};
use crate::session_queue::{self, SessionQueue};
use crate::sessions::{NodeEntry, ToController};
use crate::stream::{FrameStream, StreamEnd, outbound_with_control};
use crate::streams::tunnel::TunnelEnds;

/// Tunnel requests that may wait for a session's stream (more are refused as busy).
const TUNNEL_REQUESTS: usize = 64;
use crate::trust::TrustError;
use crate::trust::tls::check_peer_validity;
use crate::{Error, Result, Shared};

/// The `EdgeHub` gRPC service. Build it through [`crate::CloudHub`].
pub struct EdgeHubService {
    shared: Arc<Shared>,
}

impl EdgeHubService {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Reads and checks the hello: a valid node name, the same as the client certificate's
    /// `identity`.
    async fn hello(&self, identity: &str, inbound: &mut Streaming<EdgeFrame>) -> Result<EdgeHello> {
        let frame = self.shared.first_frame(inbound.message()).await?;
        let Some(edge_frame::Frame::Hello(hello)) = frame.frame else {
            return Err(Error::UnexpectedFrame(
                "the first frame must be EdgeFrame.hello",
            ));
        };
        routing::validate_node_name(&hello.node_name)?;
        let entries = hello.inventory.as_ref().map_or(0, |i| i.entries.len());
        let max = self.shared.config.max_inventory_entries;
        if entries > max {
            return Err(Error::InventoryTooLarge { entries, max });
        }
        if hello.node_name != identity {
            let mismatch = TrustError::IdentityMismatch {
                certificate: identity.to_owned(),
                hello: hello.node_name,
            };
            return Err(self.shared.trust.refuse(identity, mismatch).into());
        }
        Ok(hello)
    }
}

/// The node named by the request's verified TLS client certificate
/// (`CN=system:node:<name>, O=system:nodes`) and the Node uid the certificate is bound to
/// (`None` for an unbound one, see [`crate::trust::Trust::check_edge_node`]); the certificate
/// must be valid now: on a TLS session resumed from a ticket it is the certificate of the
/// handshake that made the ticket, which rustls does not verify again (see
/// [`check_peer_validity`]).
///
/// # Errors
/// [`TrustError::NoClientCertificate`] without one (a connection that bypassed the mutual
/// TLS listener, e.g. in-process) or when its subject is not a node's,
/// [`TrustError::CertificateNotCurrent`] when it expired or is not yet valid.
pub(crate) fn peer_node<T>(
    request: &Request<T>,
) -> std::result::Result<(String, Option<String>), TrustError> {
    let certs = request.peer_certs().ok_or_else(|| {
        TrustError::NoClientCertificate("the connection has no TLS client certificate".into())
    })?;
    let leaf = certs
        .first()
        .ok_or_else(|| TrustError::NoClientCertificate("empty certificate chain".into()))?;
    let node = verge_pki::node_identity(leaf)
        .map_err(|e| TrustError::NoClientCertificate(e.to_string()))?;
    let uid =
        verge_pki::node_uid(leaf).map_err(|e| TrustError::NoClientCertificate(e.to_string()))?;
    check_peer_validity(leaf, &format!("node {node}"), SystemTime::now())?;
    Ok((node, uid))
}

#[tonic::async_trait]
impl EdgeHub for EdgeHubService {
    type ConnectStream = FrameStream<CloudFrame>;
    type TunnelStream = FrameStream<TunnelFrame>;
    type DialStream = FrameStream<TunnelFrame>;

    /// An edge pod's connection to a Service endpoint across the link (see
    /// [`crate::streams`]'s `dial`): only a ready endpoint of the named Service.
    async fn dial(
        &self,
        request: Request<Streaming<TunnelFrame>>,
    ) -> Result<Response<Self::DialStream>, Status> {
        let trust = &self.shared.trust;
        let (node, uid) = peer_node(&request).map_err(|error| trust.refuse("dial", error))?;
        trust.check_edge_node(&node, uid.as_deref(), "dial").await?;
        let Some(streams) = self.shared.streams.as_ref() else {
            return Err(Status::unavailable(
                "service dials are off on this cloudhub",
            ));
        };
        let mut inbound = request.into_inner();
        let first = self.shared.first_frame(inbound.message()).await?;
        let Some(tunnel_frame::Frame::Dial(dial)) = first.frame else {
            crate::metrics::global().service_dial("refused");
            return Err(Status::invalid_argument(
                "the first frame of a dial must be TunnelFrame.dial",
            ));
        };
        let frames =
            crate::streams::dial::dial(&self.shared, streams, &node, dial, inbound).await?;
        let frames = tokio_stream::wrappers::ReceiverStream::new(frames).map(Ok);
        Ok(Response::new(Box::pin(frames)))
    }

    /// The node's end of a tunnel cloudhub asked it to open (see
    /// [`crate::streams`]): the first frame names the tunnel, which must have been
    /// requested from this node.
    async fn tunnel(
        &self,
        request: Request<Streaming<TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let trust = &self.shared.trust;
        let (node, uid) = peer_node(&request).map_err(|error| trust.refuse("tunnel", error))?;
        trust
            .check_edge_node(&node, uid.as_deref(), "tunnel")
            .await?;
        let Some(streams) = self.shared.streams.as_ref() else {
            return Err(Status::unavailable("streams are off on this cloudhub"));
        };
        let mut inbound = request.into_inner();
        let first = self.shared.first_frame(inbound.message()).await?;
        let Some(tunnel_frame::Frame::Open(open)) = first.frame else {
            return Err(Status::invalid_argument(
                "the first tunnel frame must be TunnelFrame.open",
            ));
        };
        let (outbound, frames) = mpsc::channel(16);
        streams
            .tunnels
            .arrive(&node, &open.tunnel_id, TunnelEnds { inbound, outbound })?;
        let frames = tokio_stream::wrappers::ReceiverStream::new(frames).map(Ok);
        Ok(Response::new(Box::pin(frames)))
    }

    /// A kubelet serving certificate for the calling node (see
    /// [`crate::streams`]'s `serving`).
    async fn serving_certificate(
        &self,
        request: Request<ServingCertificateRequest>,
    ) -> Result<Response<ServingCertificateResponse>, Status> {
        let trust = &self.shared.trust;
        let (node, uid) = peer_node(&request).map_err(|error| trust.refuse("serving", error))?;
        trust
            .check_edge_node(&node, uid.as_deref(), "serving certificate")
            .await?;
        let Some(streams) = self.shared.streams.as_ref() else {
            return Err(Status::unavailable("streams are off on this cloudhub"));
        };
        let (certificate, csr_name) =
            crate::streams::serving::issue(streams, &node, &request.get_ref().csr).await?;
        info!(%node, csr = %csr_name, "serving certificate issued");
        Ok(Response::new(ServingCertificateResponse {
            certificate,
            csr_name,
        }))
    }

    /// Signs a new certificate for the node of the connection's client certificate, from a
    /// CSR for that same node (see [`crate::trust::Trust::renew`]).
    async fn renew_certificate(
        &self,
        request: Request<RenewRequest>,
    ) -> Result<Response<RenewResponse>, Status> {
        let trust = &self.shared.trust;
        let (node, uid) = peer_node(&request).map_err(|error| trust.refuse("renewal", error))?;
        let issued = trust
            .renew(&node, uid.as_deref(), &request.get_ref().csr)
            .await?;
        Ok(Response::new(RenewResponse {
            certificate: issued.certificate_pem,
            csr_name: issued.csr_name,
        }))
    }

    /// Accepts an edge stream: hello, welcome, then messages both ways until the stream ends
    /// (see `docs/protocol.md`). Handshake errors are returned as the call's status.
    async fn connect(
        &self,
        request: Request<Streaming<EdgeFrame>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let peer = request.remote_addr();
        let (identity, uid) = peer_node(&request)
            .map_err(|error| self.shared.trust.refuse(&format!("{peer:?}"), error))?;
        let mut inbound = request.into_inner();
        let hello = self
            .hello(&identity, &mut inbound)
            .await
            .inspect_err(|error| {
                metrics::global().refused(error);
                warn!(%error, ?peer, "edge handshake refused");
            })?;
        self.shared
            .trust
            .check_edge_node(&identity, uid.as_deref(), "session")
            .await?;
        let config = &self.shared.config;
        let session_id = routing::new_id();
        let (tx, rx) = mpsc::channel(session_queue::WIRE_BUFFER);
        let (control, control_rx) = mpsc::channel(TUNNEL_REQUESTS);
        let queue = SessionQueue::new(config);
        let end = StreamEnd::new();
        let welcome = CloudFrame {
            frame: Some(cloud_frame::Frame::Welcome(Welcome {
                session_id: session_id.clone(),
                keepalive_interval_ms: u64::try_from(config.keepalive_interval.as_millis())
                    .unwrap_or(u64::MAX),
                max_frame_bytes: config.max_frame_bytes as u64,
                kubelet_clients: self
                    .shared
                    .streams
                    .as_ref()
                    .and_then(|s| s.kubelet_clients.clone()),
            })),
        };
        let node = hello.node_name;
        let span = info_span!("edge_session", %node, %session_id);
        span.in_scope(|| {
            info!(?peer, version = %hello.edgecore_version, "edge session started");
        });
        let session = Session {
            shared: self.shared.clone(),
            node: node.clone(),
            session_id: session_id.clone(),
            queue: queue.clone(),
            end: end.clone(),
            rate: rate_limiter(config.node_message_rate, config.node_message_burst),
            answer_rate: rate_limiter(config.node_answer_rate, config.node_answer_burst),
            budget: crate::budget::ByteBudget::new(config.node_upstream_bytes),
        };
        let inventory = hello.inventory.unwrap_or_default();
        self.shared
            .registry
            .attach_node(
                &node,
                NodeEntry {
                    session_id,
                    queue: queue.clone(),
                    end: end.clone(),
                    inventory,
                    control,
                },
                config.max_sessions,
            )
            .inspect_err(|error| {
                metrics::global().refused(error);
                warn!(%error, %node, "edge session refused");
            })?;
        let delivery = session_queue::deliver(self.shared.clone(), node, queue, tx, end.clone());
        self.shared.tracker.spawn(delivery.instrument(span.clone()));
        self.shared
            .tracker
            .spawn(session.run(inbound).instrument(span));
        Ok(Response::new(outbound_with_control(
            vec![welcome],
            control_rx,
            rx,
            end,
            cloud_frame,
        )))
    }
}

/// The wire frame of a downstream message. The session's channels carry boxed messages: a
/// tokio channel allocates its first block of 32 slots when it is made, and 32 unboxed
/// envelopes (400 bytes each) would cost every idle session 12.5 KiB.
fn cloud_frame(envelope: Box<Envelope>) -> CloudFrame {
    metrics::global().message(Direction::Downstream, &envelope);
    CloudFrame {
        frame: Some(cloud_frame::Frame::Message(Message::from(*envelope))),
    }
}

impl Session {
    /// Hands an upstream message to a controller serving `group`: the first of them (in
    /// round-robin order) with room in its message queue, in messages and in bytes
    /// ([`crate::budget`]); when all are full, waits for room in the first for at most
    /// `upstream_wait`. The message first takes its bytes from this node's budget, waiting as
    /// long when the node's earlier messages still hold it. Back-pressure: this session reads
    /// nothing more from its edge meanwhile, and HTTP/2 flow control slows the edge down.
    ///
    /// # Errors
    /// A reason for the edge's `error` answer: no controller serves the group, the node's or
    /// the controllers' queues stayed full for `upstream_wait`, or they detached.
    async fn forward(&self, group: Group, envelope: Envelope) -> std::result::Result<(), String> {
        let targets = self.shared.registry.upstream_targets(group)?;
        let size = envelope.budget_size();
        let wait = self.shared.config.upstream_wait;
        let node_bytes = match self.budget.try_take(size) {
            Some(bytes) => bytes,
            None => {
                debug!(size, "the node's upstream bytes are all queued; waiting");
                tokio::select! {
                    taken = tokio::time::timeout(wait, self.budget.take(size)) => match taken {
                        Ok(bytes) => bytes,
                        Err(_elapsed) => return Err(format!(
                            "node {} has {} bytes of messages waiting for controllers (nodeUpstreamBytes) since {wait:?}; retry later",
                            self.node,
                            self.budget.used()
                        )),
                    },
                    () = self.end.ended() => return Err("session ended".to_owned()),
                }
            }
        };
        let message = |held| ToController::Message {
            node: self.node.clone(),
            envelope: Box::new(envelope),
            _held: Arc::new(held),
        };
        for target in &targets {
            let Ok(slot) = target.tx.try_reserve() else {
                continue;
            };
            let Some(controller_bytes) = target.budget.try_take(size) else {
                continue;
            };
            slot.send(message(crate::budget::Held::new(
                node_bytes,
                controller_bytes,
            )));
            debug!(controller = %target.name, "forwarded upstream");
            return Ok(());
        }
        let Some(first) = targets.first() else {
            return Err(format!("no controller attached for group \"{group}\""));
        };
        debug!(controller = %first.name, "controller queues full; waiting for room");
        let room = async {
            let slot = first.tx.reserve().await.ok()?;
            let bytes = first.budget.take(size).await;
            Some((slot, bytes))
        };
        tokio::select! {
            room = tokio::time::timeout(wait, room) => match room {
                Ok(Some((slot, controller_bytes))) => {
                    slot.send(message(crate::budget::Held::new(node_bytes, controller_bytes)));
                    Ok(())
                }
                Ok(None) => Err(format!("the controller for group \"{group}\" detached; retry later")),
                Err(_elapsed) => Err(format!(
                    "every controller for group \"{group}\" stayed busy for {wait:?}; retry later"
                )),
            },
            () = self.end.ended() => Err("session ended".to_owned()),
        }
    }
}

/// The reading half of one edge session.
struct Session {
    shared: Arc<Shared>,
    node: String,
    session_id: String,
    queue: Arc<SessionQueue>,
    end: Arc<StreamEnd>,
    /// `nodeMessageRate` with `nodeMessageBurst` for new upstream messages.
    rate: DefaultDirectRateLimiter,
    /// `nodeAnswerRate` with `nodeAnswerBurst` for the edge's answers.
    answer_rate: DefaultDirectRateLimiter,
    /// `nodeUpstreamBytes`: this node's upstream bytes waiting in controller queues.
    budget: crate::budget::ByteBudget,
}

/// A per-session limiter of `rate` messages per second with `burst`.
fn rate_limiter(rate: u32, burst: u32) -> DefaultDirectRateLimiter {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
}

impl Session {
    /// Reads frames until the edge closes, the session is replaced, times out, sends a
    /// malformed frame, or cloudhub shuts down; then deregisters.
    async fn run(self, mut inbound: Streaming<EdgeFrame>) {
        let idle = self.shared.config.idle_timeout();
        loop {
            let next = tokio::select! {
                () = self.end.ended() => break,
                () = self.shared.shutdown.cancelled() => {
                    self.end.finish(Some(Error::ShuttingDown));
                    break;
                }
                next = tokio::time::timeout(idle, inbound.message()) => next,
            };
            let outcome = match next {
                Err(_elapsed) => Err(Error::Timeout(idle)),
                Ok(Err(status)) => Err(Error::from_inbound(status)),
                Ok(Ok(None)) => {
                    self.end.finish(None);
                    break;
                }
                // Boxed: handling a frame (a forward to a controller at most) is most of
                // this future's size, and the task lives as long as the session; boxed, an
                // idle session's task is about 5 KiB smaller (`cargo xtask bench scale`).
                Ok(Ok(Some(frame))) => Box::pin(self.handle_frame(frame)).await,
            };
            if let Err(error) = outcome {
                metrics::global().refused(&error);
                if matches!(error, Error::Stream(_)) {
                    info!(%error, "edge stream broken");
                } else {
                    warn!(%error, "edge session ends with an error");
                }
                self.end.finish(Some(error));
                break;
            }
        }
        self.shared
            .registry
            .detach_node(&self.node, &self.session_id);
        info!("edge session ended");
    }

    async fn handle_frame(&self, frame: EdgeFrame) -> Result<()> {
        match frame.frame {
            Some(edge_frame::Frame::Message(message)) => self.handle_message(message).await,
            Some(edge_frame::Frame::Hello(_)) => {
                Err(Error::UnexpectedFrame("hello after the session started"))
            }
            None => Err(Error::UnexpectedFrame("EdgeFrame without a frame")),
        }
    }

    /// Reads a wire message from the edge.
    async fn handle_message(&self, message: Message) -> Result<()> {
        let envelope = Envelope::try_from(message)?;
        metrics::global().message(Direction::Upstream, &envelope);
        self.route(envelope).await
    }

    /// Answers keepalives and forwards everything else to a controller of its group, or
    /// answers `error` when none can take it. An answer (`ack`, `error`, `response`) also
    /// clears the downstream message it answers from the session's in-flight set.
    #[instrument(level = "debug", skip_all, fields(
        message_id = %envelope.id,
        operation = %envelope.operation(),
        resource = %envelope.path(),
    ))]
    async fn route(&self, mut envelope: Envelope) -> Result<()> {
        let parent_id = envelope.id.clone();
        let edge_key = envelope.key().cloned();
        match routing::upstream(&self.node, &mut envelope)? {
            Upstream::Keepalive => {
                let reply = routing::keepalive_reply_to(parent_id);
                if self.queue.push(reply, None).is_err() {
                    debug!("downstream queue full; keepalive answer skipped");
                }
                Ok(())
            }
            Upstream::Forward(group) => {
                let answer = envelope.is_answer();
                if let Some(answered) = answer.then(|| envelope.parent()).flatten()
                    && self.queue.answered(answered.as_str())
                {
                    debug!(parent_id = %answered, "downstream message answered");
                }
                if answer && self.answer_rate.check().is_err() {
                    metrics::global().refusal("rate_limit");
                    debug!("answer over nodeAnswerRate not forwarded");
                    return Ok(());
                }
                let forwarded = if !answer && self.rate.check().is_err() {
                    metrics::global().refusal("rate_limit");
                    Err(format!(
                        "rate limited: node {} sends more than {} messages/s (burst {}); retry later",
                        self.node,
                        self.shared.config.node_message_rate,
                        self.shared.config.node_message_burst
                    ))
                } else {
                    // A traced report continues its trace through cloudhub (the wait for
                    // room at a controller included); the controller's spans are children.
                    let span = verge_telemetry::propagation::continued(&envelope.trace, || {
                        verge_telemetry::span!(
                            "cloudhub.upstream",
                            verge.node = %self.node,
                            verge.message.id = %envelope.id,
                            verge.resource = %envelope.path(),
                            verge.operation = %envelope.operation(),
                        )
                    });
                    let traced = verge_telemetry::propagation::inject(&span);
                    if !traced.is_empty() {
                        envelope.trace = traced;
                    }
                    self.forward(group, envelope).instrument(span).await
                };
                let Err(reason) = forwarded else {
                    return Ok(());
                };
                warn!(%reason, "upstream message not forwarded; answering error");
                let reply = routing::error_reply(parent_id, group, edge_key, &reason);
                if let Err(full) = self.queue.push(reply, None) {
                    // The edge keeps its message in its (redb) outbox and sends it again.
                    warn!(
                        waiting = full.waiting,
                        "downstream queue full; error answer skipped"
                    );
                }
                Ok(())
            }
        }
    }
}
