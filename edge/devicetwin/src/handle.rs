//! [`DeviceTwinHandle`]: the twin logic as other modules call it (the DMI server for mapper
//! reports, the eventbus for MQTT twin updates): report values, set a device state, read a
//! twin, and follow every change.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, oneshot};
use verge_device_api::Twin;

use super::devices::DeviceId;
use super::error::Error;
use super::twin::{DeviceTwins, TwinDocument};
use super::writer::{Op, Reply};
use crate::error::Result;

/// Calls into devicetwin; cheap to clone. Every change is applied in order by one writer
/// and committed (with the `devicestatus` report for the cloud, when the cloud-visible
/// state changed) before the call returns.
#[derive(Debug, Clone)]
pub struct DeviceTwinHandle {
    ops: mpsc::Sender<Op>,
    changes: broadcast::Sender<Arc<TwinDocument>>,
}

impl DeviceTwinHandle {
    pub(super) fn new(
        ops: mpsc::Sender<Op>,
        changes: broadcast::Sender<Arc<TwinDocument>>,
    ) -> Self {
        Self { ops, changes }
    }

    /// Reports values of some properties of Device `namespace/name` (KubeEdge: a twin
    /// update with `actual` values): each twin's `reported` and `observedDesired`, when
    /// present, replace the stored ones (a value without a `timestamp` in its metadata gets
    /// the current time). The `devicestatus` report it causes continues the current span's
    /// trace, if any (see `devicetwin::trace`). Returns the twin before and after, with the delta of desired vs
    /// reported ([`TwinDocument::delta`]). When a `reportToCloud` property changed, the
    /// new `devicestatus` report is committed with the values.
    ///
    /// # Errors
    /// [`UnknownDevice`](Error::UnknownDevice), [`UnknownProperty`](Error::UnknownProperty),
    /// [`NoTwins`](Error::NoTwins), [`ValueTooLarge`](Error::ValueTooLarge): nothing is
    /// stored; [`NotStored`](Error::NotStored) when the commit failed;
    /// [`Stopped`](Error::Stopped) once devicetwin has stopped.
    pub async fn report(
        &self,
        namespace: &str,
        name: &str,
        twins: Vec<Twin>,
    ) -> Result<TwinDocument> {
        let id = DeviceId::new(namespace, name);
        let trace = verge_telemetry::propagation::inject_current();
        let reported = self
            .call(|reply| Op::Report {
                id,
                twins,
                trace,
                reply,
            })
            .await;
        crate::metrics::global().twin_report(reported.is_ok());
        reported
    }

    /// Sets the state of Device `namespace/name` as a mapper reported it (one of
    /// [`STATES`](super::twin::STATES), any case; stored lower-case). An online state
    /// (`online`, `ok`) refreshes `lastOnlineTime` (at most once a minute while the state
    /// stays the same). Returns the twin before and after (no properties `updated`).
    ///
    /// # Errors
    /// [`InvalidState`](Error::InvalidState), [`UnknownDevice`](Error::UnknownDevice),
    /// [`NotStored`](Error::NotStored), [`Stopped`](Error::Stopped).
    pub async fn set_state(
        &self,
        namespace: &str,
        name: &str,
        state: &str,
    ) -> Result<TwinDocument> {
        let id = DeviceId::new(namespace, name);
        let state = state.to_owned();
        let trace = verge_telemetry::propagation::inject_current();
        self.call(|reply| Op::State {
            id,
            state,
            trace,
            reply,
        })
        .await
    }

    /// The current twin of Device `namespace/name` (KubeEdge's `twin/get`): every property
    /// with its desired, reported and observed-desired values, the state and last online
    /// time.
    ///
    /// # Errors
    /// [`UnknownDevice`](Error::UnknownDevice), [`Stopped`](Error::Stopped).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<DeviceTwins> {
        let id = DeviceId::new(namespace, name);
        self.call(|reply| Op::Get { id, reply }).await
    }

    /// The current twin of every Device on this node, in `namespace/name` order
    /// (KubeEdge's `membership/get`: each with its state and last online time).
    ///
    /// # Errors
    /// [`Stopped`](Error::Stopped).
    pub async fn list(&self) -> Result<Vec<DeviceTwins>> {
        self.call(|reply| Op::List { reply }).await
    }

    /// Every committed change from now on (reports, and state changes that changed the
    /// record), as [`TwinDocument`]s. A receiver that falls behind gets
    /// `RecvError::Lagged` and may [`get`](Self::get) the twins it cares about.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<TwinDocument>> {
        self.changes.subscribe()
    }

    /// Tells the writer that Device `id` changed or went (from the reconciler).
    pub(super) async fn sync(&self, id: DeviceId) {
        // A stopped writer needs no sync.
        let _ = self.ops.send(Op::Sync { id }).await;
    }

    /// Tells the writer to check every record against the devices (after a relist).
    pub(super) async fn sync_all(&self) {
        let _ = self.ops.send(Op::SyncAll).await;
    }

    async fn call<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.ops.send(op(reply)).await.map_err(|_| Error::Stopped)?;
        answer.await.map_err(|_| Error::Stopped)?
    }
}
