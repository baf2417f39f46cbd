//! The `ControllerHub` service: controllers attach, receive upstream messages of their groups
//! and node session events, and send downstream messages (KubeEdge: the beehive channel
//! between cloudhub and edgecontroller/devicecontroller, here a gRPC stream so controllers
//! and cloudhub scale as separate processes).
//!
//! A stream boundary: downstream `Routed` messages become [`Envelope`]s here, and what the
//! registry queues for a controller (`ToController`) is written as `HubFrame`s by
//! [`hub_frame`].

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, info, info_span, instrument, warn};
use verge_core::{Envelope, Group};
use verge_proto::Message;
use verge_proto::hub::controller_hub_server::ControllerHub;
use verge_proto::hub::{
    ControllerFrame, ControllerHello, DeliveryError, DeliveryFailure, HubFrame, Routed,
    controller_frame, hub_frame,
};

use crate::routing;
use crate::sessions::{ControllerEntry, ToController};
use crate::stream::{FrameStream, StreamEnd, outbound_prioritized};
use crate::trust::{ReviewedUser, TrustError};
use crate::{Error, Result, Shared};

/// The `ControllerHub` gRPC service. Build it through [`crate::CloudHub`].
pub struct ControllerHubService {
    shared: Arc<Shared>,
}

impl ControllerHubService {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Checks a controller hello: a name and at least one known group other than `hub`.
pub(crate) fn parse_hello(hello: &ControllerHello) -> Result<Vec<Group>> {
    if hello.name.is_empty() {
        return Err(Error::InvalidControllerHello("name is required".into()));
    }
    let mut groups = Vec::new();
    for g in &hello.groups {
        let group: Group = g
            .parse()
            .map_err(|e| Error::InvalidControllerHello(format!("{e}")))?;
        if group == Group::Hub {
            return Err(Error::InvalidControllerHello(
                "group \"hub\" is served by cloudhub".into(),
            ));
        }
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    if groups.is_empty() {
        return Err(Error::InvalidControllerHello(
            "at least one group is required".into(),
        ));
    }
    Ok(groups)
}

impl ControllerHubService {
    /// The controller's user: its `authorization: Bearer <token>` checked by a TokenReview
    /// (see [`crate::trust::Trust::review_controller`]).
    async fn authenticate<T>(&self, request: &Request<T>) -> Result<ReviewedUser, Status> {
        let trust = &self.shared.trust;
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            let peer = format!("controller at {:?}", request.remote_addr());
            return Err(trust
                .refuse(&peer, TrustError::ControllerUnauthenticated)
                .into());
        };
        Ok(trust.review_controller(token).await?)
    }
}

#[tonic::async_trait]
impl ControllerHub for ControllerHubService {
    type AttachStream = FrameStream<HubFrame>;

    /// Accepts a controller stream: hello, then the session snapshot, then events, upstream
    /// messages and delivery errors (see `docs/protocol.md`).
    async fn attach(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let user = self.authenticate(&request).await?;
        let mut inbound = request.into_inner();
        let frame = self.shared.first_frame(inbound.message()).await?;
        let Some(controller_frame::Frame::Hello(hello)) = frame.frame else {
            return Err(
                Error::UnexpectedFrame("the first frame must be ControllerFrame.hello").into(),
            );
        };
        let groups = parse_hello(&hello).inspect_err(|error| {
            crate::metrics::global().refused(error);
            warn!(%error, "attach refused");
        })?;
        self.shared.trust.authorize_groups(&user, &groups).await?;
        let (tx, rx) = mpsc::channel(self.shared.config.controller_queue_len);
        let (control, control_rx) = mpsc::channel(self.shared.config.controller_queue_len);
        let end = StreamEnd::new();
        let user = user.name;
        let entry = ControllerEntry {
            name: hello.name.clone(),
            user: user.clone(),
            groups: groups.clone(),
            tx: tx.clone(),
            budget: crate::budget::ByteBudget::new(self.shared.config.controller_queue_bytes),
            control,
            end: end.clone(),
        };
        let (id, snapshot) = self
            .shared
            .registry
            .attach_controller(entry)
            .map_err(|error| self.shared.trust.refuse(&user, error))?;
        let span = info_span!("controller", name = %hello.name, %user, id);
        span.in_scope(
            || info!(groups = ?hello.groups, nodes = snapshot.len(), "controller attached"),
        );
        let attachment = Attachment {
            shared: self.shared.clone(),
            id,
            groups,
            tx,
            end: end.clone(),
        };
        self.shared
            .tracker
            .spawn(attachment.run(inbound).instrument(span));
        let snapshot = snapshot.into_iter().map(hub_frame).collect();
        Ok(Response::new(outbound_prioritized(
            snapshot, control_rx, rx, end, hub_frame,
        )))
    }
}

/// The wire frame of what goes to a controller.
fn hub_frame(item: ToController) -> HubFrame {
    let frame = match item {
        ToController::Session(session) => hub_frame::Frame::Session(session),
        // `held` is dropped here: the message's bytes go back to its node's and its
        // controller's budgets as it is written.
        ToController::Message { node, envelope, .. } => hub_frame::Frame::Message(Routed {
            node,
            message: Some(Message::from(*envelope)),
        }),
        ToController::DeliveryError(error) => hub_frame::Frame::DeliveryError(error),
    };
    HubFrame { frame: Some(frame) }
}

/// The reading half of one controller stream.
struct Attachment {
    shared: Arc<Shared>,
    id: u64,
    /// The groups of its hello: the only groups it may send.
    groups: Vec<Group>,
    tx: mpsc::Sender<ToController>,
    end: Arc<StreamEnd>,
}

impl Attachment {
    /// Reads downstream messages until the controller detaches, sends a malformed frame, or
    /// cloudhub shuts down.
    async fn run(self, mut inbound: Streaming<ControllerFrame>) {
        loop {
            let next = tokio::select! {
                () = self.end.ended() => break,
                () = self.shared.shutdown.cancelled() => {
                    self.end.finish(Some(Error::ShuttingDown));
                    break;
                }
                next = inbound.message() => next,
            };
            let outcome = match next {
                Err(status) => Err(Error::from_inbound(status)),
                Ok(None) => {
                    self.end.finish(None);
                    break;
                }
                Ok(Some(frame)) => match frame.frame {
                    Some(controller_frame::Frame::Message(routed)) => self.downstream(routed).await,
                    Some(controller_frame::Frame::Hello(_)) => {
                        Err(Error::UnexpectedFrame("hello after the stream started"))
                    }
                    None => Err(Error::UnexpectedFrame("ControllerFrame without a frame")),
                },
            };
            if let Err(error) = outcome {
                crate::metrics::global().refused(&error);
                warn!(%error, "controller stream ends with an error");
                self.end.finish(Some(error));
                break;
            }
        }
        self.shared.registry.detach_controller(self.id);
        info!("controller detached");
    }

    /// Reads a `Routed` wire message, then [`Attachment::deliver`]s it.
    async fn downstream(&self, routed: Routed) -> Result<()> {
        let Routed { node, message } = routed;
        let message = message.ok_or(Error::UnexpectedFrame("Routed without a message"))?;
        let envelope = Envelope::try_from(message)?;
        self.deliver(node, envelope).await
    }

    /// Validates, strips the node prefix and queues on the node's session (which coalesces,
    /// tracks and resends it, see `delivery`); answers a `DeliveryError` when the node is not
    /// connected here or its queue is full.
    #[instrument(level = "debug", skip_all, fields(
        node = %node,
        message_id = %envelope.id,
        resource = %envelope.path(),
    ))]
    async fn deliver(&self, node: String, envelope: Envelope) -> Result<()> {
        if !self.groups.contains(&envelope.group) {
            let reason = format!(
                "group {:?} is not served by this controller (its hello named {}); nothing was sent",
                envelope.group.as_str(),
                self.groups
                    .iter()
                    .map(|g| format!("{:?}", g.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            crate::metrics::global().delivery_failure("group_not_served");
            warn!(%reason, "downstream message refused");
            let error = DeliveryError {
                node,
                message_id: envelope.id.to_string(),
                reason,
                failure: DeliveryFailure::GroupNotServed.into(),
            };
            self.report(error).await;
            return Ok(());
        }
        let message = routing::downstream(&node, envelope)?;
        let message_id = message.id.to_string();
        let Err(undeliverable) = self.shared.registry.deliver(&node, message, Some(self.id)) else {
            return Ok(());
        };
        crate::metrics::global().delivery_failure(undeliverable.metric_reason());
        let reason = undeliverable.reason(&node);
        warn!(%reason, "downstream message not delivered");
        let error = DeliveryError {
            node,
            message_id,
            reason,
            failure: undeliverable.failure().into(),
        };
        self.report(error).await;
        Ok(())
    }

    /// Sends `error` to this controller (waits for room in its message queue, like an
    /// upstream message; gives up when the stream ends).
    async fn report(&self, error: DeliveryError) {
        tokio::select! {
            () = self.end.ended() => {}
            _ = self.tx.send(ToController::DeliveryError(error)) => {}
        }
    }
}
