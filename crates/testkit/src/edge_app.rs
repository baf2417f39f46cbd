//! [`EchoApp`]: an edge app of a third-party group (`verge/apps/<group>/...`, architecture.md §11)
//! for tests and benchmarks: it answers every message it receives on `<topic>/reply`, as an app
//! built on any MQTT client would, and hands what it received to the caller.

use std::time::Duration;

use base64::Engine as _;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// A connected echo app; its connection task ends when the app is dropped.
#[derive(Debug)]
pub struct EchoApp {
    client: AsyncClient,
    received: mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
}

/// `value`'s JSON text as base64: the `content` of an `AppMessage` in protobuf's JSON.
pub fn content(value: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

impl EchoApp {
    /// Connects with `options`, subscribes to `topics` (QoS 1) and answers every JSON message
    /// with an `id` on `<its topic>/reply` with `{"id": "reply-<id>", "parentId": <id>,
    /// "content": base64 of {"done": <id>}}`.
    ///
    /// # Errors
    /// The subscription cannot be queued.
    pub async fn start(options: MqttOptions, topics: &[String]) -> anyhow::Result<Self> {
        let (client, mut eventloop) = AsyncClient::new(options, 1024);
        eventloop.network_options.set_tcp_nodelay(true);
        for topic in topics {
            client.subscribe(topic, QoS::AtLeastOnce).await?;
        }
        let (tx, received) = mpsc::unbounded_channel();
        let replier = client.clone();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let Ok(message) = serde_json::from_slice::<Value>(&p.payload) else {
                            continue;
                        };
                        let id = message["id"].as_str().unwrap_or_default().to_owned();
                        let reply = json!({
                            "id": format!("reply-{id}"),
                            "parentId": id,
                            "content": content(&json!({"done": id})),
                        });
                        let _ = replier
                            .publish(
                                format!("{}/reply", p.topic),
                                QoS::AtLeastOnce,
                                false,
                                reply.to_string(),
                            )
                            .await;
                        let _ = tx.send(message);
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        Ok(Self {
            client,
            received,
            task,
        })
    }

    /// The next message the app received within `within`, if any.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        tokio::time::timeout(within, self.received.recv())
            .await
            .ok()
            .flatten()
    }

    /// Publishes `payload` (JSON) on `topic` with QoS 1.
    ///
    /// # Errors
    /// The connection task has ended.
    pub async fn publish(&self, topic: &str, payload: &Value) -> anyhow::Result<()> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.to_string())
            .await?;
        Ok(())
    }
}

impl Drop for EchoApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}
