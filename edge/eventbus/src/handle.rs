//! [`EventBusHandle`]: how devicetwin publishes on MQTT without ever waiting for the broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use rumqttc::{AsyncClient, QoS};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::error::{Error, Result};
use super::outgoing::{self, Outgoing};
use super::{DeviceRef, DeviceState, MemberDevice, TwinDelta, TwinDocEntry, TwinUpdateOutcome};

/// The queue into the MQTT client, shared by the handle and the request dispatcher.
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    client: AsyncClient,
    qos: QoS,
    node_name: Arc<str>,
    /// Cancelled when [`EventBus::run`](super::EventBus::run) has ended.
    stopped: CancellationToken,
}

impl Publisher {
    pub(crate) fn new(
        client: AsyncClient,
        qos: QoS,
        node_name: &str,
        stopped: CancellationToken,
    ) -> Self {
        Self {
            client,
            qos,
            node_name: node_name.into(),
            stopped,
        }
    }

    /// edgecore's node name (membership topics).
    pub(crate) fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Queues `message`, waiting while the queue is full.
    pub(crate) async fn send(&self, message: Outgoing) -> Result<()> {
        debug!(topic = %message.topic, "publishing");
        self.client
            .publish(message.topic, self.qos, false, message.payload)
            .await
            .map_err(|_| Error::Stopped)
    }

    /// Queues `message` or fails at once.
    pub(crate) fn try_send(&self, message: Outgoing) -> Result<()> {
        if self.stopped.is_cancelled() {
            return Err(Error::Stopped);
        }
        let topic = message.topic.clone();
        self.client
            .try_publish(message.topic, self.qos, false, message.payload)
            .map_err(|_| Error::QueueFull { topic })
    }
}

/// Publishes devicetwin's news on KubeEdge's topics: cheap to clone, never blocks. Every
/// method queues its messages for the MQTT connection and returns; while the broker is down
/// they wait in the queue (`eventBus.publishQueue`) and when it is full they are dropped with
/// [`Error::QueueFull`] (MQTT subscribers of these topics only see live news anyway). With the
/// eventbus disabled ([`EventBusHandle::disabled`]) every method is a no-op returning `Ok`.
#[derive(Debug, Clone)]
pub struct EventBusHandle {
    publisher: Option<Publisher>,
    connected: watch::Receiver<bool>,
}

impl EventBusHandle {
    pub(crate) fn new(publisher: Publisher, connected: watch::Receiver<bool>) -> Self {
        Self {
            publisher: Some(publisher),
            connected,
        }
    }

    /// A handle that publishes nothing (`eventBus.enable: false`, or tests).
    pub fn disabled() -> Self {
        Self {
            publisher: None,
            connected: watch::channel(false).1,
        }
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.publisher.is_some()
    }

    /// Whether the eventbus is connected to the broker with its subscriptions in place
    /// (`true` from the broker's `SUBACK` until the connection drops).
    pub fn is_connected(&self) -> bool {
        *self.connected.borrow()
    }

    /// Waits until [`EventBusHandle::is_connected`]; returns `false` if the eventbus stopped
    /// (or is disabled) first.
    pub async fn wait_connected(&self) -> bool {
        let mut connected = self.connected.clone();
        connected.wait_for(|c| *c).await.is_ok()
    }

    fn send_all(&self, messages: impl FnOnce(&Publisher) -> Result<Vec<Outgoing>>) -> Result<()> {
        let Some(publisher) = &self.publisher else {
            return Ok(());
        };
        for message in messages(publisher)? {
            publisher.try_send(message)?;
        }
        Ok(())
    }

    /// Publishes the answers of a twin update that did not come from MQTT (a DMI report, a
    /// desired value from the cloud) exactly as for an MQTT one: `.../twin/update/result`,
    /// then `.../document` (if `outcome.document` is not empty), then `.../delta` (if set).
    /// `event_id` may be empty (KubeEdge uses `""` for DMI reports).
    ///
    /// # Errors
    /// [`Error::QueueFull`] (the rest of the messages are not queued), [`Error::Stopped`],
    /// [`Error::Encode`].
    pub fn publish_twin_update(
        &self,
        device: &DeviceRef,
        event_id: &str,
        outcome: &TwinUpdateOutcome,
    ) -> Result<()> {
        self.send_all(|_| outgoing::twin_update(device, event_id, outcome))
    }

    /// Publishes `.../twin/update/delta` (fresh event id).
    ///
    /// # Errors
    /// As [`EventBusHandle::publish_twin_update`].
    pub fn publish_delta(&self, device: &DeviceRef, delta: &TwinDelta) -> Result<()> {
        self.send_all(|_| Ok(vec![outgoing::delta_message(device, delta)?]))
    }

    /// Publishes `.../twin/update/document` for the change `event_id`.
    ///
    /// # Errors
    /// As [`EventBusHandle::publish_twin_update`].
    pub fn publish_document(
        &self,
        device: &DeviceRef,
        event_id: &str,
        document: &BTreeMap<String, TwinDocEntry>,
    ) -> Result<()> {
        self.send_all(|_| Ok(vec![outgoing::document(device, event_id, document)?]))
    }

    /// Publishes `.../state/update/result` for a state that did not come from MQTT (a DMI
    /// `ReportDeviceStates`), with a fresh event id.
    ///
    /// # Errors
    /// As [`EventBusHandle::publish_twin_update`].
    pub fn publish_state(
        &self,
        device: &DeviceRef,
        state: DeviceState,
        last_online: Option<&str>,
    ) -> Result<()> {
        let event_id = outgoing::new_event_id();
        self.send_all(|_| {
            Ok(vec![outgoing::state_result(
                device,
                &event_id,
                state,
                last_online,
            )?])
        })
    }

    /// Publishes `$hw/events/node/<node>/membership/updated` when devices are added to or
    /// removed from this node.
    ///
    /// # Errors
    /// As [`EventBusHandle::publish_twin_update`].
    pub fn publish_membership_update(
        &self,
        added: &[MemberDevice],
        removed: &[MemberDevice],
    ) -> Result<()> {
        self.send_all(|p| {
            Ok(vec![outgoing::membership_updated(
                p.node_name(),
                added,
                removed,
            )?])
        })
    }
}
