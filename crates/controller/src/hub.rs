//! The `ControllerHub.Attach` client streams to cloudhub replicas, each re-attached with
//! jittered exponential backoff whenever it ends (like edgehub's reconnect, architecture.md §1).
//! The hello names the controller and the group it serves ([`crate::Identity`]).
//!
//! One task ([`run`]) per replica endpoint. Every stream it opens is a [`Link`] with its own
//! bounded outbound queue; the task reports [`HubEvent`]s (attached, each frame received,
//! detached) to the dispatcher through one channel, so frames of one stream keep their order.
//!
//! A stream boundary: received `Routed` messages become [`Envelope`]s here and queued
//! envelopes are written as `ControllerFrame`s; nothing else sees the wire `Message`. A
//! message that is not a valid envelope is answered `error` at once (naming the bad field).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tracing::{info, warn};
use verge_core::{Envelope, Group, Kind, MessageId, Outcome};
use verge_proto::Message;
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::{
    ControllerFrame, ControllerHello, DeliveryError, HubFrame, NodeSession, Routed,
    controller_frame, hub_frame,
};

use crate::hub_auth::HubAuth;
use crate::{Config, Error, Identity, Result};

/// Largest frame accepted from cloudhub, in bytes: cloudhub's default `max_frame_bytes`
/// (4 MiB) plus room for the `Routed` wrapper.
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// Frames buffered per stream between a link's outbound queue and gRPC.
const STREAM_BUFFER: usize = 16;

/// Source of [`Link::id`]s.
static NEXT_LINK: AtomicU64 = AtomicU64::new(1);

/// One attached stream to a cloudhub replica: where frames for that replica go. Cheap to
/// clone; sending fails once the stream ended (the frame is lost: the edge retries what was
/// not acknowledged, and a node is resynced when it connects again).
#[derive(Debug, Clone)]
pub struct Link {
    /// Unique per stream: a re-attach to the same endpoint is a new link.
    pub id: u64,
    /// The replica's endpoint URI, for logs.
    pub endpoint: Arc<str>,
    tx: mpsc::Sender<Outbound>,
}

/// A message for a replica: the node it is for and the message (cloud-side path).
pub type Outbound = (String, Envelope);

/// Links are equal when they are the same stream.
impl PartialEq for Link {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Link {}

impl Link {
    /// A link with a fresh id whose messages go to `tx`.
    pub fn new(endpoint: &str, tx: mpsc::Sender<Outbound>) -> Self {
        Self {
            id: NEXT_LINK.fetch_add(1, Ordering::Relaxed),
            endpoint: endpoint.into(),
            tx,
        }
    }

    /// Queues `envelope` for `node`, waiting while the queue is full (back-pressure).
    ///
    /// # Errors
    /// [`NotSent`] when the stream ended (the message is dropped).
    pub async fn send(&self, node: &str, envelope: Envelope) -> Result<(), NotSent> {
        let item = (node.to_owned(), envelope);
        self.tx.send(item).await.map_err(|_| NotSent)
    }

    /// Queues `envelope` for `node` without waiting.
    ///
    /// # Errors
    /// [`NotSent`] when the queue is full or the stream ended (the message is dropped).
    pub fn try_send(&self, node: &str, envelope: Envelope) -> Result<(), NotSent> {
        let item = (node.to_owned(), envelope);
        self.tx.try_send(item).map_err(|_| NotSent)
    }
}

/// A message was not queued on a [`Link`]: its stream ended (or, for
/// [`Link::try_send`], its queue is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cloudhub link ended or its queue is full")]
pub struct NotSent;

/// What the attach tasks tell the dispatcher, in stream order.
#[derive(Debug)]
pub enum HubEvent {
    /// A stream was attached; the replica will announce every node it holds.
    Attached(Link),
    /// Link `link`'s replica announced a node session (connected or disconnected).
    Session {
        /// The [`Link::id`].
        link: u64,
        /// The announcement.
        session: NodeSession,
    },
    /// An upstream message from `node` arrived on link `link`.
    Message {
        /// The [`Link::id`].
        link: u64,
        /// The node whose session it came from.
        node: String,
        /// The message (boxed: messages are large, the other events small).
        envelope: Box<Envelope>,
    },
    /// Link `link`'s replica could not deliver a downstream message.
    DeliveryError {
        /// The [`Link::id`].
        link: u64,
        /// Which message, for which node, why.
        error: DeliveryError,
    },
    /// Link `link` ended; the nodes it announced are no longer reachable through it.
    Detached {
        /// The [`Link::id`].
        link: u64,
    },
}

/// The endpoint of cloudhub address `address`, with `config`'s connect timeout and HTTP/2
/// keepalive.
///
/// # Errors
/// [`Error::Endpoint`] when the address is not a valid URI.
pub fn endpoint(config: &Config, address: &str) -> Result<Endpoint> {
    let endpoint = verge_proto::transport::endpoint(address).map_err(|source| Error::Endpoint {
        address: address.to_owned(),
        source,
    })?;
    Ok(endpoint
        .connect_timeout(config.connect_timeout)
        .http2_keep_alive_interval(config.keepalive_interval)
        .keep_alive_timeout(config.keepalive_interval)
        .keep_alive_while_idle(true))
}

/// The first frame of every stream: `ControllerHello{name, groups}`; cloudhub forwards the
/// controller the upstream messages of these groups.
pub fn hello(name: &str, groups: &[Group]) -> ControllerFrame {
    ControllerFrame {
        frame: Some(controller_frame::Frame::Hello(ControllerHello {
            name: name.to_owned(),
            groups: groups.iter().map(|g| g.as_str().to_owned()).collect(),
        })),
    }
}

/// One cloudhub replica to attach to.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its URI, for logs.
    pub address: String,
    /// Its endpoint (timeouts, keepalives).
    pub endpoint: Endpoint,
    /// The name its certificate is verified for, when not the URI's host.
    pub server_name: Option<String>,
    /// The CA and token source.
    pub auth: Arc<HubAuth>,
    /// Who attaches (hello name and group, answers it makes).
    pub identity: Identity,
}

/// Keeps one stream to the replica `target` attached until `stop`,
/// reporting to `events`; returns when `stop` is cancelled or the dispatcher is gone.
/// Stream failures are logged and retried with backoff.
pub async fn run(
    target: Target,
    config: Arc<Config>,
    events: mpsc::Sender<HubEvent>,
    stop: CancellationToken,
) {
    let address = target.address.clone();
    let builder = backoff(&config);
    let mut backoff = builder.build();
    loop {
        let mut link = None;
        let outcome = tokio::select! {
            () = stop.cancelled() => Ok(()),
            r = attach(&target, &config, &events, &mut link) => r,
        };
        if let Some(link) = link {
            // Ignored when the dispatcher is gone (shutdown).
            let _ = events.send(HubEvent::Detached { link }).await;
            backoff = builder.build();
        }
        if stop.is_cancelled() || events.is_closed() {
            return;
        }
        let delay = backoff.next().unwrap_or(config.reconnect_max_backoff);
        match outcome {
            Ok(()) => warn!(cloudhub = %address, ?delay, "cloudhub ended the stream"),
            Err(error) => {
                warn!(error = %error.reason(), cloudhub = %address, ?delay,
                    "cloudhub stream failed");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One stream: connect, send the hello, then pump frames both ways until it ends. Sets
/// `link` to the link's id once attached.
async fn attach(
    target: &Target,
    config: &Config,
    events: &mpsc::Sender<HubEvent>,
    link: &mut Option<u64>,
) -> Result<()> {
    let address = target.address.as_str();
    let tls = target.auth.tls().await?;
    let token = target.auth.token().await?;
    let channel = verge_proto::transport::connect_tls(
        target.endpoint.clone(),
        tls,
        target.server_name.clone(),
    )
    .await
    .map_err(Error::Connect)?;
    let mut client = ControllerHubClient::new(channel)
        .max_decoding_message_size(MAX_FRAME_BYTES)
        .max_encoding_message_size(MAX_FRAME_BYTES);
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    // Cannot fail: the channel is empty and its receiver alive.
    let identity = &target.identity;
    let _ = tx.try_send(hello(config.name_for(identity), &[identity.group]));
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    let bearer = format!("Bearer {token}")
        .parse()
        .map_err(|_| Error::Attach(tonic::Status::internal("the token is not a valid header")))?;
    request.metadata_mut().insert("authorization", bearer);
    let mut inbound = client
        .attach(request)
        .await
        .map_err(Error::Attach)?
        .into_inner();
    let (out_tx, mut outbound) = mpsc::channel(config.outbound_queue.max(1));
    let attached = Link::new(address, out_tx);
    let id = attached.id;
    if events
        .send(HubEvent::Attached(attached.clone()))
        .await
        .is_err()
    {
        return Ok(());
    }
    *link = Some(id);
    info!(cloudhub = %address, link = id, "attached to cloudhub");
    loop {
        tokio::select! {
            frame = inbound.message() => match frame.map_err(Error::Attach)? {
                Some(frame) => {
                    let Some(event) = read(id, frame, &attached, identity) else { continue };
                    if events.send(event).await.is_err() {
                        return Ok(());
                    }
                }
                None => return Ok(()),
            },
            Some((node, envelope)) = outbound.recv() => {
                if tx.send(routed_frame(node, envelope)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// The wire frame of a message for `node`.
fn routed_frame(node: String, envelope: Envelope) -> ControllerFrame {
    crate::metrics::global().message(true, &envelope);
    ControllerFrame {
        frame: Some(controller_frame::Frame::Message(Routed {
            node,
            message: Some(Message::from(envelope)),
        })),
    }
}

/// The event of a frame received on link `link`; `None` for a frame to ignore. A message
/// that is not a valid envelope is answered `error` on `link` (when it has an id to answer).
fn read(link: u64, frame: HubFrame, reply: &Link, identity: &Identity) -> Option<HubEvent> {
    match frame.frame {
        Some(hub_frame::Frame::Session(session)) => Some(HubEvent::Session { link, session }),
        Some(hub_frame::Frame::DeliveryError(error)) => {
            Some(HubEvent::DeliveryError { link, error })
        }
        Some(hub_frame::Frame::Message(Routed { node, message })) => {
            let Some(message) = message else {
                warn!(node = %node, "routed frame without message ignored");
                return None;
            };
            match Envelope::try_from(message) {
                Ok(envelope) => {
                    crate::metrics::global().message(false, &envelope);
                    Some(HubEvent::Message {
                        link,
                        node,
                        envelope: Box::new(envelope),
                    })
                }
                Err(error) => {
                    refuse(reply, &node, error, identity);
                    None
                }
            }
        }
        None => {
            warn!("empty hub frame ignored");
            None
        }
    }
}

/// Answers a malformed upstream message `error` with the conversion error as reason.
fn refuse(link: &Link, node: &str, error: verge_proto::Error, identity: &Identity) {
    let id = error.message_id().to_owned();
    let reason = Error::Route(error).reason();
    warn!(node = %node, %reason, "malformed upstream message refused");
    let Ok(to) = MessageId::parse(id) else {
        return;
    };
    let kind = Kind::Answer {
        to,
        outcome: Outcome::Error(reason),
        key: None,
    };
    let answer = Envelope::new(identity.module.clone(), identity.group, kind, Vec::new());
    if link.try_send(node, answer).is_err() {
        warn!(node = %node, "link queue full or ended, error answer dropped");
    }
}

/// Re-attach delays: from `reconnect_min_backoff`, doubling, capped at
/// `reconnect_max_backoff`, with full jitter added, never giving up.
fn backoff(config: &Config) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(config.reconnect_min_backoff)
        .with_max_delay(config.reconnect_max_backoff)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let config = Config::default();
        let d = backoff(&config).build().next().expect("unbounded retries");
        assert!(
            d >= config.reconnect_min_backoff && d <= config.reconnect_min_backoff * 2,
            "{d:?}"
        );
    }

    #[test]
    fn hello_names_the_groups() {
        let Some(controller_frame::Frame::Hello(h)) = hello("dc", &[Group::Device]).frame else {
            panic!("not a hello");
        };
        assert_eq!(
            (h.name.as_str(), h.groups.as_slice()),
            ("dc", ["device".to_owned()].as_slice())
        );
    }

    #[test]
    fn bad_address_is_an_error() {
        let config = Config::default();
        assert!(matches!(
            endpoint(&config, "not a uri"),
            Err(Error::Endpoint { .. })
        ));
    }

    #[test]
    fn links_are_unique_and_close_with_their_stream() {
        let (tx, rx) = mpsc::channel(1);
        let (a, b) = (
            Link::new("http://a:1", tx.clone()),
            Link::new("http://a:1", tx),
        );
        assert_ne!(a.id, b.id);
        drop(rx);
        let ka = Envelope::keepalive(verge_core::Module::EdgeController, None);
        assert!(a.try_send("x", ka).is_err());
    }
}
