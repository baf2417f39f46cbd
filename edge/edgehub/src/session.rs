//! One cloudhub session: handshake, then the message pump with keepalives and the silence
//! deadline.
//!
//! A stream boundary: the only place where edgecore reads or writes the wire `Message`.
//! Received messages become [`Envelope`]s (a malformed one is answered `error`, naming the
//! bad field, when it has an id to answer); envelopes sent are written by [`send`].

use crate::error::Error as HubError;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, trace, warn};
use verge_core::{Envelope, Group, Kind, MessageId, Module, Outcome};
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{CloudFrame, EdgeFrame, EdgeHello, Welcome, cloud_frame, edge_frame};
use verge_proto::{Inventory, InventoryEntry, Message};

use super::drain::Drain;
use super::{DEFAULT_KEEPALIVE, EdgeHub, SessionInfo};
use crate::HubSettings;
use crate::{Error, Result};

/// Frames buffered between the pump and the gRPC request stream.
const FRAME_BUFFER: usize = 16;
/// A session ends after this many keepalive intervals without a frame from cloudhub.
const SILENT_INTERVALS: u32 = 3;

/// How a session ended.
pub(super) enum Ended {
    /// `shutdown` was cancelled.
    Shutdown,
    /// The session failed; `established` says whether it got its `Welcome`.
    Failed { established: bool, error: Error },
}

/// The gRPC endpoints of `[cloudhub] + cloudhub_alternates`, in order, with their addresses.
pub(super) fn endpoints(config: &HubSettings) -> Result<Vec<(String, Endpoint)>> {
    std::iter::once(&config.edge_hub.server)
        .chain(&config.edge_hub.server_alternates)
        .map(|address| {
            verge_proto::transport::endpoint(address)
                .map(|e| {
                    let e = e
                        .connect_timeout(config.edge_hub.connect_timeout)
                        .tcp_nodelay(true);
                    (address.clone(), e)
                })
                .map_err(|source| HubError::CloudhubAddress {
                    address: address.clone(),
                    source,
                })
        })
        .collect()
}

/// An open session after the handshake.
struct Open {
    frames: mpsc::Sender<EdgeFrame>,
    inbound: Streaming<CloudFrame>,
    welcome: Welcome,
    /// The session's client, for tunnels and serving certificates on the same connection.
    client: EdgeHubClient<Channel>,
}

impl EdgeHub {
    /// Runs one session to its end.
    pub(super) async fn session(
        &mut self,
        endpoint: &Endpoint,
        shutdown: &CancellationToken,
    ) -> Ended {
        let open = tokio::select! {
            () = shutdown.cancelled() => return Ended::Shutdown,
            open = self.handshake(endpoint) => open,
        };
        let open = match open {
            Ok(open) => open,
            Err(error) => {
                return Ended::Failed {
                    established: false,
                    error,
                };
            }
        };
        self.generation += 1;
        crate::metrics::global().session_established(self.generation);
        let keepalive = match open.welcome.keepalive_interval_ms {
            0 => DEFAULT_KEEPALIVE,
            ms => Duration::from_millis(ms),
        };
        info!(session_id = %open.welcome.session_id, ?keepalive, generation = self.generation, "cloudhub session established");
        self.sessions.send_replace(Some(SessionInfo {
            session_id: open.welcome.session_id.clone(),
            generation: self.generation,
            keepalive,
            client: open.client.clone(),
        }));
        let pumped = self.pump(open, keepalive, shutdown).await;
        crate::metrics::global().session_ended();
        match pumped {
            Ok(()) => Ended::Shutdown,
            Err(error) => Ended::Failed {
                established: true,
                error,
            },
        }
    }

    /// Connects, sends `EdgeHello` and waits for `Welcome`, each step bounded by
    /// `connect_timeout`.
    async fn handshake(&self, endpoint: &Endpoint) -> Result<Open> {
        let bound = self.config.edge_hub.connect_timeout;
        let tls = self
            .credentials
            .client_config(&self.config.node_name)
            .map_err(HubError::Credentials)?;
        let server_name = self.config.edge_hub.tls_server_name.clone();
        let channel: Channel =
            verge_proto::transport::connect_tls(endpoint.clone(), tls, server_name)
                .await
                .map_err(HubError::Connect)?;
        let inventory = self.store.blocking(|s| s.identities()).await?;
        debug!(objects = inventory.len(), "sending hello");
        let inventory = Inventory {
            entries: inventory
                .into_iter()
                .map(|object| InventoryEntry {
                    r#type: object.key.kind.as_str().to_owned(),
                    namespace: object.key.namespace,
                    name: object.key.name,
                    uid: object.uid,
                    resource_version: object.resource_version,
                })
                .collect(),
        };
        let (frames, frame_rx) = mpsc::channel(FRAME_BUFFER);
        let hello = EdgeHello {
            node_name: self.config.node_name.clone(),
            token: self.config.edge_hub.token.clone(),
            inventory: Some(inventory),
            edgecore_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        frames
            .send(EdgeFrame {
                frame: Some(edge_frame::Frame::Hello(hello)),
            })
            .await
            .map_err(|_| HubError::StreamClosed)?;
        let mut client = EdgeHubClient::new(channel);
        let response = tokio::time::timeout(bound, client.connect(ReceiverStream::new(frame_rx)))
            .await
            .map_err(|_| HubError::Timeout(bound))?
            .map_err(HubError::Stream)?;
        let mut inbound = response.into_inner();
        let client = client.clone();
        let first = tokio::time::timeout(bound, inbound.message())
            .await
            .map_err(|_| HubError::Timeout(bound))?
            .map_err(HubError::Stream)?
            .ok_or(HubError::StreamClosed)?;
        match first.frame {
            Some(cloud_frame::Frame::Welcome(welcome)) => Ok(Open {
                frames,
                inbound,
                welcome,
                client,
            }),
            _ => Err(HubError::Protocol("first frame is not a Welcome")),
        }
    }

    /// Moves messages both ways and drains the outbox until the stream ends, cloudhub goes
    /// silent or `shutdown`.
    async fn pump(
        &mut self,
        open: Open,
        keepalive: Duration,
        shutdown: &CancellationToken,
    ) -> Result<()> {
        let Open {
            frames,
            mut inbound,
            welcome,
            client,
        } = open;
        let tunnels = Tunnels {
            client,
            clients: welcome.kubelet_clients,
        };
        let silence = keepalive * SILENT_INTERVALS;
        let mut ticker = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let deadline = tokio::time::sleep(silence);
        tokio::pin!(deadline);
        let mut drain = Drain::new(self.store.clone(), self.config.edge_hub.outbox.clone());
        drain.fill(&frames).await?;
        loop {
            let retry_at = drain.next_deadline();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                frame = inbound.next() => {
                    let frame = frame.ok_or(HubError::StreamClosed)?.map_err(HubError::Stream)?;
                    deadline.as_mut().reset(Instant::now() + silence);
                    self.dispatch(frame, &mut drain, &frames, &tunnels).await?;
                }
                () = &mut deadline => return Err(HubError::Timeout(silence)),
                _ = ticker.tick() => {
                    send(&frames, Envelope::keepalive(Module::EdgeHub, None)).await?;
                }
                () = self.outbox.notified() => drain.fill(&frames).await?,
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    drain.on_timer(Instant::now());
                    drain.fill(&frames).await?;
                }
                Some(msg) = self.upstream.recv() => send(&frames, msg).await?,
            }
        }
    }

    /// Hands a downstream frame to its module: answers to outbox reports to `drain` (which
    /// may then send more), hub messages nowhere, the rest to metamanager.
    async fn dispatch(
        &self,
        frame: CloudFrame,
        drain: &mut Drain,
        frames: &mpsc::Sender<EdgeFrame>,
        tunnels: &Tunnels,
    ) -> Result<()> {
        let msg = match frame.frame {
            Some(cloud_frame::Frame::Message(msg)) => msg,
            Some(cloud_frame::Frame::OpenTunnel(open)) => {
                self.open_tunnel(open.tunnel_id, open.dial, tunnels);
                return Ok(());
            }
            Some(cloud_frame::Frame::Welcome(_)) | None => {
                warn!("ignoring a frame that is not a message");
                return Ok(());
            }
        };
        let msg = match Envelope::try_from(msg) {
            Ok(msg) => {
                crate::metrics::global().message(false, &msg);
                msg
            }
            Err(error) => {
                warn!(%error, "malformed downstream message refused");
                return match refusal(&error) {
                    Some(answer) => send(frames, answer).await,
                    None => Ok(()),
                };
            }
        };
        if msg.group == Group::Hub {
            trace!(id = %msg.id, op = %msg.operation(), "hub message");
            return Ok(());
        }
        let Some(msg) = drain.answer(msg).await? else {
            return drain.fill(frames).await;
        };
        self.downstream
            .send(msg)
            .await
            .map_err(|_| HubError::HubStopped)
    }
}

/// What a session hands the streaming server with each tunnel request.
struct Tunnels {
    client: EdgeHubClient<Channel>,
    clients: Option<verge_proto::hub::KubeletClients>,
}

impl EdgeHub {
    /// Hands cloudhub's request for tunnel `id` to the streaming server, if there is one
    /// with room (otherwise cloudhub's wait times out and the API server is told so).
    fn open_tunnel(
        &self,
        id: String,
        dial: Option<verge_proto::hub::ServiceDial>,
        tunnels: &Tunnels,
    ) {
        let server = match &dial {
            Some(_) => &self.pod_tunnels,
            None => &self.tunnels,
        };
        let Some(server) = server else {
            debug!(%id, pod = dial.is_some(), "tunnel requested, but nothing serves it");
            return;
        };
        let request = crate::tunnel::TunnelRequest {
            id,
            client: tunnels.client.clone(),
            clients: tunnels.clients.clone(),
            dial,
        };
        if server.try_send(request).is_err() {
            warn!("tunnel request dropped: its server is busy or stopped");
        }
    }
}

/// Writes `msg` to the request stream.
pub(super) async fn send(frames: &mpsc::Sender<EdgeFrame>, msg: Envelope) -> Result<()> {
    trace!(id = %msg.id, resource = %msg.path(), "upstream");
    crate::metrics::global().message(true, &msg);
    frames
        .send(EdgeFrame {
            frame: Some(edge_frame::Frame::Message(Message::from(msg))),
        })
        .await
        .map_err(|_| HubError::StreamClosed)
}

/// The `error` answer to a downstream message that is not a valid envelope (its reason
/// names the bad field), so cloudhub stops resending it; `None` when it has no id to answer.
pub fn refusal(error: &verge_proto::Error) -> Option<Envelope> {
    let to = MessageId::parse(error.message_id()).ok()?;
    let kind = Kind::Answer {
        to,
        outcome: Outcome::Error(error.to_string()),
        key: None,
    };
    Some(Envelope::new(
        Module::MetaManager,
        Group::Resource,
        kind,
        Vec::new(),
    ))
}
