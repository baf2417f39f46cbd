//! Shared by the eventbus component tests: an in-memory [`TwinService`] (a fake of our own
//! trait, with just enough twin logic), an MQTT edge application built on rumqttc, and the
//! eventbus configuration for a test broker.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use verge_edgecore::Config;
use verge_edgecore::eventbus::{
    DeviceRef, DeviceState, MemberDevice, MsgTwin, StateUpdated, TwinDelta, TwinDocEntry,
    TwinError, TwinService, TwinUpdate, TwinUpdateOutcome, TwinValue, Twins,
};
use verge_testkit::mosquitto::Mosquitto;

/// How long a test waits for one message.
pub const STEP: Duration = Duration::from_secs(10);

/// One device of the fake.
#[derive(Debug, Default, Clone)]
pub struct FakeDevice {
    pub twins: Twins,
    pub state: Option<DeviceState>,
}

/// An in-memory twin store: updates replace expected/actual values, stamp them, check `int`
/// values, delete optional twins on `null`.
#[derive(Debug, Default)]
pub struct FakeTwins {
    pub devices: Mutex<HashMap<DeviceRef, FakeDevice>>,
}

impl FakeTwins {
    /// A fake holding `devices` with no twins.
    pub fn with_devices(devices: &[DeviceRef]) -> Arc<Self> {
        let fake = Self::default();
        {
            let mut map = fake.devices.lock().expect("lock");
            for d in devices {
                map.insert(d.clone(), FakeDevice::default());
            }
        }
        Arc::new(fake)
    }

    /// A copy of `device`'s twins.
    pub fn twins(&self, device: &DeviceRef) -> Option<Twins> {
        let map = self.devices.lock().expect("lock");
        map.get(device).map(|d| d.twins.clone())
    }

    fn apply(
        &self,
        device: &DeviceRef,
        update: TwinUpdate,
    ) -> Result<TwinUpdateOutcome, TwinError> {
        let mut map = self.devices.lock().expect("lock");
        let entry = map
            .get_mut(device)
            .ok_or_else(|| TwinError::DeviceNotFound(device.clone()))?;
        let now = chrono::Utc::now().timestamp_millis();
        let mut twins = entry.twins.clone();
        let mut outcome = TwinUpdateOutcome::default();
        for (name, change) in update.twins {
            let last = twins.get(&name).cloned();
            let current = match change {
                None => {
                    twins.remove(&name);
                    None
                }
                Some(change) => {
                    let mut twin = last.clone().unwrap_or_else(|| MsgTwin {
                        optional: Some(true),
                        metadata: change.metadata.clone().or(Some(Default::default())),
                        ..MsgTwin::default()
                    });
                    let type_ = twin
                        .metadata
                        .as_ref()
                        .and_then(|m| m.type_.clone())
                        .unwrap_or_else(|| "string".to_owned());
                    for (slot, value) in [
                        (&mut twin.expected, change.expected),
                        (&mut twin.actual, change.actual),
                    ] {
                        let Some(value) = value else { continue };
                        let text = value.value.clone().unwrap_or_default();
                        if type_ == "int" && text.parse::<i64>().is_err() {
                            return Err(TwinError::InvalidProperty {
                                property: name.clone(),
                                reason: "the value is not an integer".to_owned(),
                            });
                        }
                        let mut stamped = TwinValue::new(text);
                        stamped.metadata = Some(verge_edgecore::eventbus::payload::ValueMetadata {
                            timestamp: Some(now),
                        });
                        *slot = Some(stamped);
                    }
                    twins.insert(name.clone(), twin.clone());
                    Some(twin)
                }
            };
            outcome.changed.insert(name.clone(), current.clone());
            outcome
                .document
                .insert(name, TwinDocEntry { last, current });
        }
        outcome.delta = TwinDelta::of(&twins);
        entry.twins = twins;
        Ok(outcome)
    }
}

impl TwinService for FakeTwins {
    fn update(
        &self,
        device: DeviceRef,
        update: TwinUpdate,
    ) -> BoxFuture<'_, Result<TwinUpdateOutcome, TwinError>> {
        let result = self.apply(&device, update);
        async move { result }.boxed()
    }

    fn get(&self, device: DeviceRef) -> BoxFuture<'_, Result<Twins, TwinError>> {
        let result = self.twins(&device).ok_or(TwinError::DeviceNotFound(device));
        async move { result }.boxed()
    }

    fn set_state(
        &self,
        device: DeviceRef,
        state: DeviceState,
    ) -> BoxFuture<'_, Result<StateUpdated, TwinError>> {
        let result = {
            let mut map = self.devices.lock().expect("lock");
            match map.get_mut(&device) {
                Some(d) => {
                    d.state = Some(state);
                    Ok(StateUpdated {
                        last_online: state.is_online().then(|| "2026-11-24 05:30:00".to_owned()),
                    })
                }
                None => Err(TwinError::DeviceNotFound(device)),
            }
        };
        async move { result }.boxed()
    }

    fn members(&self) -> BoxFuture<'_, Result<Vec<MemberDevice>, TwinError>> {
        let mut members: Vec<MemberDevice> = {
            let map = self.devices.lock().expect("lock");
            map.iter()
                .map(|(d, dev)| MemberDevice {
                    id: d.to_string(),
                    name: d.name.clone(),
                    state: dev.state.map(|s| s.to_string()).unwrap_or_default(),
                    ..MemberDevice::default()
                })
                .collect()
        };
        members.sort_by(|a, b| a.id.cmp(&b.id));
        async move { Ok(members) }.boxed()
    }
}

/// edgecore's configuration with the eventbus on `broker`, fast reconnects.
pub fn config(broker: &Mosquitto) -> Config {
    let mut config = Config {
        node_name: "edge-test".to_owned(),
        ..Config::default()
    };
    let bus = &mut config.event_bus;
    bus.enable = true;
    bus.mqtt_server = broker.url();
    bus.username = broker.username().to_owned();
    bus.password_file = Some(broker.password_file());
    bus.reconnect_initial_backoff = Duration::from_millis(100);
    bus.reconnect_max_backoff = Duration::from_millis(500);
    bus.keepalive = Duration::from_secs(5);
    // No Service rules on the host (see common::config).
    config.network.service_proxy = false;
    config
}

/// A message the app received.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    pub body: Value,
}

/// An MQTT edge application: publishes requests, collects what arrives on its filters.
pub struct App {
    pub client: AsyncClient,
    rx: mpsc::UnboundedReceiver<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for App {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl App {
    /// Connects to `broker` with its credentials and subscribes to `filters` (QoS 1).
    pub async fn connect(broker: &Mosquitto, filters: &[&str]) -> Result<Self> {
        let id = format!("app-{}", uuid::Uuid::new_v4());
        let mut options = MqttOptions::new(id, "127.0.0.1", broker.port());
        options.set_credentials(broker.username(), broker.password());
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        for f in filters {
            client.subscribe(*f, QoS::AtLeastOnce).await?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (subscribed_tx, subscribed_rx) = oneshot::channel();
        let mut subscribed_tx = Some(subscribed_tx);
        let mut waiting = filters.len();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        waiting = waiting.saturating_sub(1);
                        if waiting == 0
                            && let Some(t) = subscribed_tx.take()
                        {
                            let _ = t.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let body = serde_json::from_slice(&p.payload).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(&p.payload).into_owned())
                        });
                        let _ = tx.send(Received {
                            topic: p.topic,
                            body,
                        });
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        tokio::time::timeout(STEP, subscribed_rx)
            .await
            .context("app subscription timed out")??;
        Ok(Self { client, rx, task })
    }

    /// Publishes `payload` on `topic` (QoS 1).
    pub async fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>) -> Result<()> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.into())
            .await?;
        Ok(())
    }

    /// The next message, whatever its topic.
    pub async fn next(&mut self) -> Result<Received> {
        match tokio::time::timeout(STEP, self.rx.recv()).await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => bail!("app connection task ended"),
            Err(_) => bail!("no message within {STEP:?}"),
        }
    }

    /// The next message, which must be on `topic`.
    pub async fn expect(&mut self, topic: &str) -> Result<Value> {
        let m = self.next().await?;
        if m.topic != topic {
            bail!(
                "expected a message on {topic}, got one on {}: {}",
                m.topic,
                m.body
            );
        }
        Ok(m.body)
    }

    /// Nothing arrives within `quiet`.
    pub async fn expect_silence(&mut self, quiet: Duration) -> Result<()> {
        match tokio::time::timeout(quiet, self.rx.recv()).await {
            Ok(Some(m)) => bail!("unexpected message on {}: {}", m.topic, m.body),
            _ => Ok(()),
        }
    }

    /// Drops every message received so far.
    pub fn drain(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }
}

/// A twin update payload for one property.
pub fn update(
    event_id: &str,
    property: &str,
    expected: Option<&str>,
    actual: Option<&str>,
    type_: &str,
) -> Vec<u8> {
    let mut twin = serde_json::Map::new();
    if let Some(e) = expected {
        twin.insert("expected".into(), serde_json::json!({"value": e}));
    }
    if let Some(a) = actual {
        twin.insert("actual".into(), serde_json::json!({"value": a}));
    }
    twin.insert("metadata".into(), serde_json::json!({"type": type_}));
    let body = serde_json::json!({
        "event_id": event_id,
        "timestamp": 0,
        "twin": BTreeMap::from([(property, Value::Object(twin))]),
    });
    serde_json::to_vec(&body).expect("json")
}
