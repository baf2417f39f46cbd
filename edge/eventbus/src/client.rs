//! [`EventBus`]: the MQTT connection. One task polls rumqttc's event loop (connects,
//! subscribes after every `CONNACK`, reconnects with backoff) and hands received messages to
//! a second task that serves them one at a time, so a slow twin store never stalls the
//! connection's keep-alive.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, Outgoing, Packet, Publish, QoS,
    Request, Subscribe, SubscribeFilter, SubscribeReasonCode,
};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use verge_runtime::ErrorChain;

use super::dispatch::Dispatcher;
use super::error::{Error, Result};
use super::handle::{EventBusHandle, Publisher};
use super::{BrokerAddress, TwinService, topic};
use crate::config::{EventBusConfig, MqttQos};
use verge_runtime::backoff::Backoff;
use verge_runtime::budget::ByteBudget;

/// How long a stopping eventbus waits to say `DISCONNECT` to the broker.
const DISCONNECT_GRACE: Duration = Duration::from_millis(500);

/// The eventbus module: build it with [`EventBus::new`], run it with [`EventBus::run`].
pub struct EventBus {
    config: EventBusConfig,
    address: BrokerAddress,
    client: AsyncClient,
    eventloop: EventLoop,
    dispatcher: Dispatcher,
    stopped: CancellationToken,
    connected: watch::Sender<bool>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl EventBus {
    /// Prepares the client of node `node_name` from `bus` (YAML `eventBus:`; reads
    /// `passwordFile`) serving requests
    /// with `service`, and the handle devicetwin publishes through. Returns `None` and a
    /// [disabled](EventBusHandle::disabled) handle when `eventBus.enable` is false. Nothing
    /// connects before [`EventBus::run`].
    ///
    /// # Errors
    /// [`Error::Address`] for an unusable `mqttServer`, [`Error::PasswordFile`] when the
    /// password file cannot be read.
    pub fn new(
        node_name: &str,
        bus: &EventBusConfig,
        service: Arc<dyn TwinService>,
    ) -> Result<(Option<Self>, EventBusHandle)> {
        if !bus.enable {
            return Ok((None, EventBusHandle::disabled()));
        }
        let address = BrokerAddress::parse(&bus.mqtt_server)?;
        let mut options = MqttOptions::new(
            bus.client_id_for(node_name),
            address.host.clone(),
            address.port,
        );
        options
            .set_keep_alive(bus.keepalive)
            .set_clean_session(true)
            .set_max_packet_size(bus.max_packet_size, bus.max_packet_size);
        if !bus.username.is_empty() {
            options.set_credentials(bus.username.clone(), read_password(bus)?);
        }
        let (client, mut eventloop) = AsyncClient::new(options, bus.publish_queue);
        eventloop
            .network_options
            .set_connection_timeout(bus.connect_timeout.as_secs().max(1));
        // Small answers go out at once (no Nagle delay behind an unacknowledged segment).
        eventloop.network_options.set_tcp_nodelay(true);
        let stopped = CancellationToken::new();
        let (connected, _) = watch::channel(false);
        let publisher = Publisher::new(client.clone(), qos(bus.qos), node_name, stopped.clone());
        let handle = EventBusHandle::new(publisher.clone(), connected.subscribe());
        let bus = Self {
            config: bus.clone(),
            address,
            client,
            eventloop,
            dispatcher: Dispatcher::new(service, publisher),
            stopped,
            connected,
        };
        Ok((Some(bus), handle))
    }

    /// Runs until `shutdown` is cancelled: keeps the connection up and serves requests. Never
    /// fails because of the broker: every connection error is logged and retried after the
    /// backoff (`eventBus.reconnect*Backoff`, reset by a successful connect).
    ///
    /// # Errors
    /// None so far; the `Result` is the module contract of edgecore.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let Self {
            config,
            address,
            client,
            mut eventloop,
            dispatcher,
            stopped,
            connected,
        } = self;
        let _stopped = stopped.drop_guard();
        let (tx, rx) = mpsc::channel(config.receive_queue);
        let bytes = ByteBudget::new(config.receive_queue_bytes);
        let serving = verge_runtime::tasks::spawn(
            "eventbus dispatch",
            serve(dispatcher, rx, shutdown.clone()),
        );
        let qos = qos(config.qos);
        let mut backoff = Backoff::new(
            config.reconnect_initial_backoff,
            config.reconnect_max_backoff,
        );
        info!(broker = %address, "eventbus connecting");
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => break,
                event = eventloop.poll() => event,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    info!(broker = %address, "eventbus connected; subscribing");
                    backoff.reset();
                    let filters = topic::SUBSCRIPTIONS
                        .iter()
                        .map(|t| SubscribeFilter::new((*t).to_owned(), qos));
                    // Ahead of anything queued, so requests are caught from now on.
                    eventloop
                        .pending
                        .push_front(Request::Subscribe(Subscribe::new_many(filters)));
                }
                Ok(Event::Incoming(Packet::SubAck(ack))) => {
                    let refused = ack
                        .return_codes
                        .iter()
                        .filter(|c| matches!(c, SubscribeReasonCode::Failure))
                        .count();
                    if refused > 0 {
                        error!(refused, "the broker refused eventbus subscriptions (ACL?)");
                    } else {
                        info!(topics = ?topic::SUBSCRIPTIONS, "eventbus subscribed");
                        connected.send_replace(true);
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    let size = publish.topic.len() + publish.payload.len();
                    let Some(held) = bytes.try_take(size) else {
                        let topic = &publish.topic;
                        warn!(%topic, size, budget = config.receive_queue_bytes, "eventbus receive queue's bytes used up; request dropped");
                        continue;
                    };
                    if let Err(full) = tx.try_send((publish, held)) {
                        let topic = &full.into_inner().0.topic;
                        warn!(%topic, capacity = config.receive_queue, "eventbus receive queue full; request dropped");
                    }
                }
                Ok(event) => debug!(?event, "mqtt"),
                Err(error) => {
                    connected.send_replace(false);
                    let delay = backoff.next_delay();
                    log_connection_error(&address, &error, delay);
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        connected.send_replace(false);
        drop(tx);
        serving.abort();
        disconnect(&client, &mut eventloop).await;
        info!("eventbus stopped");
        Ok(())
    }
}

/// Serves received messages in order until `shutdown` or the receiver closes.
async fn serve(
    dispatcher: Dispatcher,
    mut rx: mpsc::Receiver<(Publish, OwnedSemaphorePermit)>,
    shutdown: CancellationToken,
) {
    loop {
        // The permit (the message's bytes) is held until the message is served.
        let (message, _held) = tokio::select! {
            () = shutdown.cancelled() => return,
            next = rx.recv() => match next {
                Some(received) => received,
                None => return,
            },
        };
        if let Err(error) = dispatcher.serve(&message.topic, &message.payload).await {
            match error {
                Error::Stopped => return,
                error => {
                    let topic = &message.topic;
                    warn!(%topic, error = %ErrorChain(&error), "cannot answer request");
                }
            }
        }
    }
}

/// Says `DISCONNECT` so the broker drops the session at once (bounded by
/// [`DISCONNECT_GRACE`]; the connection may already be gone).
async fn disconnect(client: &AsyncClient, eventloop: &mut EventLoop) {
    if client.try_disconnect().is_err() {
        return;
    }
    let _ = tokio::time::timeout(DISCONNECT_GRACE, async {
        loop {
            match eventloop.poll().await {
                Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}

fn log_connection_error(address: &BrokerAddress, error: &ConnectionError, delay: Duration) {
    match error {
        ConnectionError::ConnectionRefused(code) => error!(
            broker = %address,
            ?code,
            ?delay,
            "the MQTT broker refused edgecore (check eventBus.username/passwordFile); retrying"
        ),
        error => warn!(
            broker = %address,
            error = %ErrorChain(error),
            ?delay,
            "eventbus disconnected; reconnecting"
        ),
    }
}

fn qos(qos: MqttQos) -> QoS {
    match qos {
        MqttQos::AtMostOnce => QoS::AtMostOnce,
        MqttQos::AtLeastOnce => QoS::AtLeastOnce,
    }
}

/// The password in `passwordFile` (trailing line break removed); empty without the file.
pub fn read_password(config: &EventBusConfig) -> Result<String> {
    let Some(path) = &config.password_file else {
        return Ok(String::new());
    };
    let text = std::fs::read_to_string(path).map_err(|source| Error::PasswordFile {
        path: path.clone(),
        source,
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}
