//! Serving one request: decode, ask the [`TwinService`], publish the answers or the error
//! result. Requests are served one at a time, in arrival order; one the twin logic does not
//! answer within [`SERVICE_TIMEOUT`] gets a 500 so the next ones are served.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};
use verge_runtime::ErrorChain;

use super::TwinService;
use super::error::Result;
use super::handle::Publisher;
use super::outgoing::{self, Outgoing};
use super::request::{self, RequestError};
use super::topic::Request;

/// How long one [`TwinService`] call may take.
pub(crate) const SERVICE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves requests with one [`TwinService`].
pub(crate) struct Dispatcher {
    service: Arc<dyn TwinService>,
    publisher: Publisher,
}

impl Dispatcher {
    pub(crate) fn new(service: Arc<dyn TwinService>, publisher: Publisher) -> Self {
        Self { service, publisher }
    }

    /// Serves the message `payload` received on `topic`: publishes the answers, or an error
    /// result on the request's result topic. Topics that are no request are ignored.
    ///
    /// # Errors
    /// Only [`Error::Stopped`](super::Error::Stopped) (the client is gone) or an encoding
    /// failure; a bad request is answered, not returned.
    pub(crate) async fn serve(&self, topic: &str, payload: &[u8]) -> Result<()> {
        let Some(request) = Request::parse(topic) else {
            debug!(%topic, "not a request; ignored");
            return Ok(());
        };
        let answer = tokio::time::timeout(SERVICE_TIMEOUT, self.answer(&request, payload))
            .await
            .unwrap_or(Err(RequestError::Timeout(SERVICE_TIMEOUT)));
        let messages = match answer {
            Ok(messages) => messages?,
            Err(error) => {
                warn!(%topic, code = error.code(), error = %ErrorChain(&error), "request refused");
                let result_topic = request.result_topic(self.publisher.node_name());
                vec![outgoing::error_result(
                    result_topic,
                    &request::event_id_of(payload),
                    &error,
                )?]
            }
        };
        for message in messages {
            self.publisher.send(message).await?;
        }
        Ok(())
    }

    /// The answers to `request`; the outer error is the request's fault, the inner one an
    /// encoding failure.
    async fn answer(
        &self,
        request: &Request,
        payload: &[u8],
    ) -> Result<Result<Vec<Outgoing>>, RequestError> {
        Ok(match request {
            Request::TwinUpdate(device) => {
                let update = request::twin_update(payload)?;
                let event_id = update.event_id.clone();
                let outcome = self.service.update(device.clone(), update).await?;
                debug!(%device, changed = outcome.changed.len(), "twin update applied");
                outgoing::twin_update(device, &event_id, &outcome)
            }
            Request::TwinGet(device) => {
                let message = request::base(payload, "twin get")?;
                let twins = self.service.get(device.clone()).await?;
                outgoing::get_result(device, &message.event_id, twins).map(|m| vec![m])
            }
            Request::StateUpdate(device) => {
                let (event_id, state) = request::state_update(payload)?;
                let updated = self.service.set_state(device.clone(), state).await?;
                outgoing::state_result(device, &event_id, state, updated.last_online.as_deref())
                    .map(|m| vec![m])
            }
            Request::MembershipGet => {
                let message = request::base(payload, "membership get")?;
                let devices = self.service.members().await?;
                let topic = request.result_topic(self.publisher.node_name());
                outgoing::membership_result(topic, &message.event_id, devices).map(|m| vec![m])
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;
    use futures::future::{BoxFuture, pending};
    use rumqttc::{AsyncClient, EventLoop, MqttOptions, QoS};
    use serde_json::Value;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::{
        DeviceRef, DeviceState, MemberDevice, StateUpdated, TwinError, TwinUpdate,
        TwinUpdateOutcome, Twins,
    };

    /// A twin logic that never answers.
    struct Hanging;

    impl TwinService for Hanging {
        fn update(
            &self,
            _: DeviceRef,
            _: TwinUpdate,
        ) -> BoxFuture<'_, Result<TwinUpdateOutcome, TwinError>> {
            pending().boxed()
        }
        fn get(&self, _: DeviceRef) -> BoxFuture<'_, Result<Twins, TwinError>> {
            pending().boxed()
        }
        fn set_state(
            &self,
            _: DeviceRef,
            _: DeviceState,
        ) -> BoxFuture<'_, Result<StateUpdated, TwinError>> {
            pending().boxed()
        }
        fn members(&self) -> BoxFuture<'_, Result<Vec<MemberDevice>, TwinError>> {
            pending().boxed()
        }
    }

    fn dispatcher() -> (Dispatcher, EventLoop) {
        let options = MqttOptions::new("t", "127.0.0.1", 1);
        let (client, eventloop) = AsyncClient::new(options, 16);
        let publisher = Publisher::new(client, QoS::AtLeastOnce, "n", CancellationToken::new());
        (Dispatcher::new(Arc::new(Hanging), publisher), eventloop)
    }

    /// What was queued for publishing, as (topic, JSON).
    fn published(eventloop: &mut EventLoop) -> Vec<(String, Value)> {
        eventloop.clean();
        eventloop
            .pending
            .drain(..)
            .filter_map(|r| match r {
                rumqttc::Request::Publish(p) => {
                    Some((p.topic, serde_json::from_slice(&p.payload).ok()?))
                }
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_twin_logic_gets_a_500_after_the_timeout() {
        let (dispatcher, mut eventloop) = dispatcher();
        let topic = "$hw/events/device/default/d/twin/get";
        dispatcher
            .serve(topic, br#"{"event_id":"g"}"#)
            .await
            .expect("served");
        let out = published(&mut eventloop);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, format!("{topic}/result"));
        assert_eq!(out[0].1["code"], 500);
        assert_eq!(out[0].1["event_id"], "g");
    }

    #[tokio::test]
    async fn other_topics_publish_nothing() {
        let (dispatcher, mut eventloop) = dispatcher();
        for topic in [
            "$hw/events/device/default/d/twin/cloud_updated",
            "$hw/events/device/d/twin/update",
        ] {
            dispatcher.serve(topic, b"{}").await.expect("ignored");
        }
        assert!(published(&mut eventloop).is_empty());
    }
}
