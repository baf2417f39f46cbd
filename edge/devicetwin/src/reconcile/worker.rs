//! The worker of one mapper: brings what the mapper holds ([`Sent`]) to what it should hold
//! ([`Desired`]) with DMI calls, one pass at a time, whenever it is poked (a Device or model
//! changed, the mapper registered) and, after a failed call, again after a back-off. Calls in
//! a pass are ordered: models first (`CreateDeviceModel` before the first `RegisterDevice`
//! of a model, `UpdateDeviceModel`), then Devices (`RegisterDevice`, `UpdateDevice`), then
//! removals (`RemoveDevice`, then `RemoveDeviceModel`). A failing call affects only this
//! mapper, and only the objects it concerns.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, warn};
use verge_runtime::ErrorChain;

use super::desired::{Desired, Sent};
use crate::devices::{DeviceCache, DeviceId};
use crate::dmi::client::MapperClient;
use crate::dmi::convert;
use crate::error::Error;
use crate::handle::DeviceTwinHandle;
use crate::state;
use crate::trace::{self, DesiredTraces};
use verge_edge_store::MetaStore;

/// The worker of one mapper.
pub(super) struct Worker {
    pub(super) protocol: String,
    pub(super) client: MapperClient,
    pub(super) devices: DeviceCache,
    pub(super) twins: DeviceTwinHandle,
    pub(super) traces: DesiredTraces,
    pub(super) store: MetaStore,
    pub(super) sent: Sent,
    pub(super) poke: Arc<Notify>,
    pub(super) backoff: (Duration, Duration),
    /// Invalid Devices already logged, with the fingerprint they were logged at.
    pub(super) logged: BTreeMap<DeviceId, String>,
}

/// How a pass went.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Outcome {
    /// Calls that succeeded.
    pub(super) done: usize,
    /// Calls that failed (retried after a back-off).
    pub(super) failed: usize,
    /// Whether a call found the mapper unreachable (no socket, no answer in time).
    pub(super) unreachable: bool,
}

/// Whether `error` means the mapper could not be reached (as opposed to an answer).
fn unreachable(error: &Error) -> bool {
    matches!(error, Error::MapperCall { source, .. } if unreachable_code(source.code()))
}

fn unreachable_code(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    )
}

impl Worker {
    /// Runs passes until `shutdown`.
    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        let mut delays = self.delays();
        let mut retry: Option<Duration> = None;
        loop {
            match retry {
                None => tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = self.poke.notified() => {}
                },
                Some(delay) => tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                },
            }
            let outcome = tokio::select! {
                () = shutdown.cancelled() => break,
                outcome = self.pass() => outcome,
            };
            retry = if outcome.failed == 0 {
                delays = self.delays();
                None
            } else {
                let delay = delays.next();
                debug!(protocol = %self.protocol, failed = outcome.failed, ?delay, "mapper calls failed; retrying");
                delay.or(Some(self.backoff.1))
            };
        }
        debug!(protocol = %self.protocol, "mapper worker stopped");
    }

    fn delays(&self) -> impl Iterator<Item = Duration> + use<> {
        ExponentialBuilder::default()
            .with_min_delay(self.backoff.0)
            .with_max_delay(self.backoff.1)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// One pass: the calls that bring the mapper to what it should hold.
    pub(super) async fn pass(&mut self) -> Outcome {
        let desired = Desired::of(&self.protocol, &self.devices.snapshot());
        self.log_invalid(&desired);
        let mut outcome = Outcome::default();
        self.calls(&desired, &mut outcome).await;
        if outcome.done > 0 {
            info!(protocol = %self.protocol, calls = outcome.done, failed = outcome.failed, "mapper updated");
        }
        outcome
    }

    /// Stores what the mapper holds (after every call that changed it, so that a pass
    /// interrupted by shutdown leaves an exact record).
    async fn save(&self) {
        let (store, protocol, sent) =
            (self.store.clone(), self.protocol.clone(), self.sent.clone());
        let stored = store
            .blocking(move |s| state::put_sent(s, &protocol, &sent))
            .await;
        if let Err(error) = stored {
            warn!(error = %ErrorChain(&error), "record of what a mapper holds not stored");
        }
    }

    /// The calls of a pass, in order; stops at the first call that finds the mapper
    /// unreachable (the rest would fail the same way, each after a timeout).
    async fn calls(&mut self, desired: &Desired, outcome: &mut Outcome) {
        for (id, (fingerprint, model)) in &desired.models {
            let key = id.to_string();
            let result = match self.sent.models.get(&key) {
                Some(sent) if sent == fingerprint => continue,
                Some(_) => self.client.update_model(convert::model(model)).await,
                None => self.client.create_model(convert::model(model)).await,
            };
            if self.record(outcome, result, id, "model") {
                self.sent.models.insert(key, fingerprint.clone());
                self.save().await;
            } else if outcome.unreachable {
                return;
            }
        }

        for (id, device) in &desired.devices {
            let key = id.to_string();
            let model_sent = desired.models.get(&device.model).map(|(fp, _)| fp);
            if self.sent.models.get(&device.model.to_string()) != model_sent {
                // Its model did not reach the mapper; retried with it.
                outcome.failed += 1;
                continue;
            }
            let update = match self.sent.devices.get(&key) {
                Some(sent) if sent == &device.fingerprint => {
                    // Nothing for the mapper: a traced change of it ends here.
                    self.traces.done(id);
                    continue;
                }
                Some(_) => true,
                None => false,
            };
            let twins = self.twins.get(&id.namespace, &id.name).await.ok();
            let message = match convert::device(&device.stored, &device.merged, twins.as_ref()) {
                Ok(message) => message,
                Err(error) => {
                    warn!(error = %ErrorChain(&error), "device not given to its mapper");
                    continue;
                }
            };
            let span = trace::dmi_span(update, id, &self.traces.get(id));
            let result = if update {
                self.client
                    .update_device(message)
                    .instrument(span.clone())
                    .await
            } else {
                self.client
                    .register_device(message)
                    .instrument(span.clone())
                    .await
            };
            if result.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            if self.record(outcome, result, id, "device") {
                self.traces.done(id);
                self.sent.devices.insert(key, device.fingerprint.clone());
                self.save().await;
            } else if outcome.unreachable {
                return;
            }
        }

        let devices = gone(&self.sent.devices, desired.devices.keys());
        if !self.remove_gone(outcome, Held::Devices, devices).await {
            return;
        }
        let models = gone(&self.sent.models, desired.models.keys());
        self.remove_gone(outcome, Held::Models, models).await;
    }

    /// Removes `keys` of kind `held` from the mapper, forgetting each once removed (or
    /// unparsable); `false` when the mapper turned out unreachable (the rest waits).
    async fn remove_gone(&mut self, outcome: &mut Outcome, held: Held, keys: Vec<String>) -> bool {
        for key in keys {
            let Some(id) = DeviceId::parse(&key) else {
                self.held_mut(held).remove(&key);
                continue;
            };
            let result = match held {
                Held::Devices => self.client.remove_device(&id.namespace, &id.name).await,
                Held::Models => self.client.remove_model(&id.namespace, &id.name).await,
            };
            if self.removed(outcome, result, &id, held.what()) {
                self.held_mut(held).remove(&key);
                self.save().await;
            } else if outcome.unreachable {
                return false;
            }
        }
        true
    }

    /// What the mapper holds of kind `held`, by key, with the fingerprint sent.
    fn held_mut(&mut self, held: Held) -> &mut BTreeMap<String, String> {
        match held {
            Held::Devices => &mut self.sent.devices,
            Held::Models => &mut self.sent.models,
        }
    }

    /// Counts a create/update call; whether it succeeded.
    fn record(
        &self,
        outcome: &mut Outcome,
        result: Result<(), Error>,
        id: &DeviceId,
        what: &str,
    ) -> bool {
        match result {
            Ok(()) => {
                outcome.done += 1;
                true
            }
            Err(error) => {
                outcome.failed += 1;
                outcome.unreachable = unreachable(&error);
                warn!(error = %ErrorChain(&error), %what, object = %id, "mapper call failed; will retry");
                false
            }
        }
    }

    /// Counts a removal; whether the object can be forgotten: done, or refused by a mapper
    /// that answered (it does not hold it). Only an unreachable mapper is retried.
    fn removed(
        &self,
        outcome: &mut Outcome,
        result: Result<(), Error>,
        id: &DeviceId,
        what: &str,
    ) -> bool {
        match result {
            Ok(()) => {
                outcome.done += 1;
                true
            }
            Err(Error::MapperCall { source, .. })
                if !matches!(
                    source.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                ) =>
            {
                outcome.done += 1;
                warn!(code = ?source.code(), message = source.message(), %what, object = %id,
                    "mapper refused a removal; forgetting the object");
                true
            }
            Err(error) => {
                outcome.failed += 1;
                warn!(error = %ErrorChain(&error), %what, object = %id, "mapper call failed; will retry");
                false
            }
        }
    }

    fn log_invalid(&mut self, desired: &Desired) {
        let invalid: BTreeSet<&DeviceId> = desired.invalid.iter().map(|(id, _, _)| id).collect();
        self.logged.retain(|id, _| invalid.contains(id));
        for (id, fingerprint, error) in &desired.invalid {
            if self.logged.get(id) != Some(fingerprint) {
                warn!(error = %ErrorChain(error), protocol = %self.protocol, "device not given to its mapper");
                self.logged.insert(id.clone(), fingerprint.clone());
            }
        }
    }
}

/// The keys of `sent` (what a mapper holds) that are not among `wanted`: to be removed.
fn gone<'a>(
    sent: &BTreeMap<String, String>,
    wanted: impl Iterator<Item = &'a DeviceId>,
) -> Vec<String> {
    let wanted: BTreeSet<String> = wanted.map(ToString::to_string).collect();
    sent.keys()
        .filter(|k| !wanted.contains(*k))
        .cloned()
        .collect()
}

/// The two kinds of object a mapper holds.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// Devices (RegisterDevice / RemoveDevice).
    Devices,
    /// Device models (CreateDeviceModel / RemoveDeviceModel).
    Models,
}

impl Held {
    /// The word logs use.
    fn what(self) -> &'static str {
        match self {
            Self::Devices => "device",
            Self::Models => "model",
        }
    }
}
