//! [`AppsBridge`]: the MQTT connection of the apps module, its own (client id
//! `<eventBus client id>-apps`, a persistent session: `cleanSession` false) so that every
//! publish on it is an inbox entry and the broker keeps the apps' messages for edgecore while
//! it restarts.
//!
//! Down: every unpublished inbox entry is published (QoS 1) in inbox order once connected
//! and whenever metamanager adds one; the broker's `PUBACK` marks it published. rumqttc
//! numbers publishes in the order they are handed to it and reports each first write
//! (`Outgoing::Publish(pkid)`), so the entries handed to it and not yet numbered are matched
//! to the packet ids in order; a rewrite after a reconnect reuses its number.
//!
//! Up: a publish on `verge/apps/<group>/<ns>/<type>/<name>/reply` is committed to the outbox
//! (an [`OutboxKey::App`](verge_edge_store::OutboxKey::App) report) before edgecore acknowledges it to
//! the broker (manual acks), so a crash before the commit has the broker deliver it again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, Publish, QoS, Request, Subscribe,
    SubscribeFilter,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use verge_runtime::ErrorChain;

use super::{AppsHandle, REPLY_SUBSCRIPTION, upstream};
use crate::Result;
use verge_edge_store::KEEP_PUBLISHED;
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_eventbus::{BrokerAddress, EventBusConfig};
use verge_runtime::backoff::Backoff;

/// Requests waiting in the client's queue (publishes, acks, the subscription).
const CLIENT_QUEUE: usize = 256;

/// The apps module's MQTT task: build it with [`AppsBridge::new`], run it with
/// [`AppsBridge::run`].
pub struct AppsBridge {
    address: BrokerAddress,
    store: MetaStore,
    hub: EdgeHubHandle,
    client: AsyncClient,
    eventloop: EventLoop,
    wake: Arc<Notify>,
    backoff: (Duration, Duration),
}

impl std::fmt::Debug for AppsBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppsBridge")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl AppsBridge {
    /// The bridge of node `node_name` for `bus` (YAML `eventBus:`: its broker, credentials,
    /// keep-alive, packet size and reconnect backoff) over `store`, reporting through `hub`,
    /// and the handle metamanager gives downstream messages to. `None` when
    /// `eventBus.enable` is false.
    ///
    /// # Errors
    /// An unusable `mqttServer` or password file (as [`verge_eventbus::EventBus::new`]).
    pub fn new(
        node_name: &str,
        bus: &EventBusConfig,
        store: MetaStore,
        hub: EdgeHubHandle,
    ) -> Result<Option<(Self, AppsHandle)>> {
        if !bus.enable {
            return Ok(None);
        }
        let address =
            BrokerAddress::parse(&bus.mqtt_server).map_err(verge_eventbus::Error::from)?;
        let mut options = MqttOptions::new(
            format!("{}-apps", bus.client_id_for(node_name)),
            address.host.clone(),
            address.port,
        );
        options
            .set_keep_alive(bus.keepalive)
            .set_clean_session(false)
            .set_manual_acks(true)
            .set_max_packet_size(bus.max_packet_size, bus.max_packet_size);
        if !bus.username.is_empty() {
            options.set_credentials(bus.username.clone(), verge_eventbus::read_password(bus)?);
        }
        let (client, mut eventloop) = AsyncClient::new(options, CLIENT_QUEUE);
        eventloop
            .network_options
            .set_connection_timeout(bus.connect_timeout.as_secs().max(1));
        // Small messages go out at once (no Nagle delay behind an unacknowledged segment).
        eventloop.network_options.set_tcp_nodelay(true);
        let wake = Arc::new(Notify::new());
        let handle = AppsHandle {
            wake: Arc::clone(&wake),
        };
        Ok(Some((
            Self {
                address,
                store,
                hub,
                client,
                eventloop,
                wake,
                backoff: (bus.reconnect_initial_backoff, bus.reconnect_max_backoff),
            },
            handle,
        )))
    }

    /// Runs until `shutdown`: keeps the connection up, publishes the inbox, commits the
    /// apps' messages. The broker being down never stops edgecore: connection errors are
    /// logged and retried after the backoff.
    ///
    /// # Errors
    /// None so far; the `Result` is the module contract of edgecore.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let Self {
            address,
            store,
            hub,
            client,
            mut eventloop,
            wake,
            backoff: (initial, max),
        } = self;
        let mut backoff = Backoff::new(initial, max);
        let mut down = Downstream::default();
        let mut connected = false;
        info!(broker = %address, "apps bridge connecting");
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => break,
                () = wake.notified(), if connected => {
                    down.hand_over(&store, &client).await;
                    continue;
                }
                event = eventloop.poll() => event,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    info!(broker = %address, "apps bridge connected");
                    backoff.reset();
                    connected = true;
                    let filter =
                        SubscribeFilter::new(REPLY_SUBSCRIPTION.to_owned(), QoS::AtLeastOnce);
                    eventloop
                        .pending
                        .push_front(Request::Subscribe(Subscribe::new_many([filter])));
                    down.hand_over(&store, &client).await;
                }
                Ok(Event::Outgoing(Outgoing::Publish(pkid))) => down.numbered(pkid),
                Ok(Event::Incoming(Packet::PubAck(ack))) => {
                    if let Some(seq) = down.acknowledged(ack.pkid) {
                        let result = store
                            .blocking(move |s| s.app_inbox_published(seq, KEEP_PUBLISHED))
                            .await;
                        if let Err(error) = result {
                            warn!(seq, error = %ErrorChain(&error), "published app message not marked; it is published again later");
                        }
                        // Room in the client's queue again.
                        down.hand_over(&store, &client).await;
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    receive(&hub, &client, publish).await;
                }
                Ok(event) => debug!(?event, "apps mqtt"),
                Err(error) => {
                    connected = false;
                    let delay = backoff.next_delay();
                    warn!(broker = %address, error = %ErrorChain(&error), ?delay, "apps bridge disconnected; reconnecting");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        let _ = client.try_disconnect();
        info!("apps bridge stopped");
        Ok(())
    }
}

/// The downstream bookkeeping of one process: which inbox entries are with the client, and
/// which packet id each got.
#[derive(Debug, Default)]
struct Downstream {
    /// The next sequence number to hand over (entries before it are with the client).
    next: u64,
    /// Handed over, packet id not known yet, in order.
    handed: VecDeque<u64>,
    /// Packet id -> sequence number, until the `PUBACK`.
    numbered: HashMap<u16, u64>,
}

impl Downstream {
    /// Hands the client every unpublished entry it does not have yet, in order, while its
    /// queue has room.
    async fn hand_over(&mut self, store: &MetaStore, client: &AsyncClient) {
        let pending = match store.blocking(MetaStore::app_inbox_pending).await {
            Ok(pending) => pending,
            Err(error) => {
                error!(error = %ErrorChain(&error), "reading the apps inbox");
                return;
            }
        };
        let next = self.next;
        for entry in pending.into_iter().filter(|e| e.seq >= next) {
            if client
                .try_publish(entry.topic.clone(), QoS::AtLeastOnce, false, entry.payload)
                .is_err()
            {
                // Full: the next PUBACK makes room and hands the rest over.
                break;
            }
            debug!(id = %entry.id, topic = %entry.topic, "app message handed to the broker");
            self.next = entry.seq + 1;
            self.handed.push_back(entry.seq);
        }
    }

    /// rumqttc wrote a publish with `pkid`: a new one takes the oldest handed entry.
    fn numbered(&mut self, pkid: u16) {
        if self.numbered.contains_key(&pkid) {
            return;
        }
        if let Some(seq) = self.handed.pop_front() {
            self.numbered.insert(pkid, seq);
        }
    }

    /// The broker acknowledged `pkid`: the entry it carried.
    fn acknowledged(&mut self, pkid: u16) -> Option<u64> {
        self.numbered.remove(&pkid)
    }
}

/// Commits an app's message to the outbox, then acknowledges it to the broker. A malformed
/// one (topic or payload) and one the full outbox refuses are acknowledged and dropped with
/// an error log; a failed commit is not acknowledged, so the broker delivers it again.
async fn receive(hub: &EdgeHubHandle, client: &AsyncClient, publish: Publish) {
    let topic = publish.topic.clone();
    let commit = match upstream(&topic, &publish.payload) {
        Ok(envelope) => hub.report(envelope).await.map_err(Some),
        Err(reason) => {
            error!(%topic, %reason, "app message dropped");
            Err(None)
        }
    };
    match commit {
        Ok(()) => debug!(%topic, "app message committed to the outbox"),
        Err(Some(error)) if error.is_outbox_full() => {
            error!(%topic, error = %ErrorChain(&error), "app message dropped: the outbox is full");
        }
        Err(Some(error)) => {
            warn!(%topic, error = %ErrorChain(&error), "app message not committed; the broker delivers it again");
            return;
        }
        Err(None) => {}
    }
    if let Err(error) = client.ack(&publish).await {
        warn!(%topic, %error, "acknowledging an app message");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_ids_follow_the_order_entries_were_handed_over() {
        let mut down = Downstream::default();
        down.handed.extend([4, 5, 6]);
        down.numbered(1);
        down.numbered(2);
        // A rewrite after a reconnect keeps its number.
        down.numbered(1);
        down.numbered(3);
        assert_eq!(down.acknowledged(2), Some(5));
        assert_eq!(down.acknowledged(1), Some(4));
        assert_eq!(down.acknowledged(1), None);
        assert_eq!(down.acknowledged(3), Some(6));
        // Wrapped around: a number is free again once acknowledged.
        down.handed.push_back(7);
        down.numbered(1);
        assert_eq!(down.acknowledged(1), Some(7));
    }
}
