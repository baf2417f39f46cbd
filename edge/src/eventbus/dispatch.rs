//! Serving one request: decode, ask the [`TwinService`], publish the answers or the error
//! result. Requests are served one at a time, in arrival order.

use std::sync::Arc;

use tracing::{debug, warn};
use verge_runtime::ErrorChain;

use super::TwinService;
use super::error::Result;
use super::handle::Publisher;
use super::outgoing::{self, Outgoing};
use super::request::{self, RequestError};
use super::topic::Request;

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
        let messages = match self.answer(&request, payload).await {
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
