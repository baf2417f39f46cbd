//! devicetwin: device twins on the edge and the DMI interface to mappers (KubeEdge:
//! devicetwin with its `dmiserver` and `dmiclient`).
//!
//! * **Twins** ([`twin`], `writer`, [`handle`]): per Device its reported and
//!   observed-desired values, state and last online time, in redb next to the objects
//!   (`state`). Mappers (DMI) and edge apps (the eventbus) change them through a
//!   [`DeviceTwinHandle`]; one writer applies changes in order and commits each batch in one
//!   transaction with the `update <ns>/devicestatus/<name>` reports of the devices whose
//!   cloud-visible state changed (only `reportToCloud` properties), under
//!   [`OutboxKey::DeviceStatus`](verge_edge_store::OutboxKey::DeviceStatus): while offline, the newest
//!   snapshot per device waits in the outbox and leaves it on reconnect.
//! * **DMI server** ([`dmi::server`]): `DeviceManagerService` on the unix socket
//!   `deviceTwin.dmiSocket` (default `/etc/kubeedge/dmi.sock`): `MapperRegister`,
//!   `ReportDeviceStatus`, `ReportDeviceStates`.
//! * **Mapper calls** ([`reconcile`], [`dmi::client`], [`dmi::convert`]): the Devices and
//!   DeviceModels the metamanager stores ([`devices`]) go to the mapper registered for each
//!   Device's `spec.protocol.protocolName` ([`mappers`], remembered across restarts).
//!
//! * **Edge apps** ([`bus`]): devicetwin serves the eventbus's MQTT twin topics
//!   ([`bus::TwinBus`]) and publishes every twin change as `twin/update/document` and
//!   `twin/update/delta` ([`bus::publish_changes`]).
//!
//! * **Tracing** (`trace`): a committed `devicestatus` report is a `devicetwin.report`
//!   span whose context the report carries up to devicecontroller; a Device change from the
//!   cloud continues its message's trace (`devicetwin.desired`) down to the DMI call.
//!
//! Bad input (an unknown device or property, an invalid Device, a failing mapper) is
//! refused or logged and affects only itself; nothing here stops edgecore except a DMI
//! socket that cannot be bound at start.

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod bus;
pub mod config;
pub mod devices;
pub mod dmi;
pub mod error;
pub mod handle;
pub mod mappers;
pub mod metrics;
pub mod reconcile;
mod state;
#[cfg(test)]
mod tests;
mod trace;
#[cfg(test)]
mod trace_tests;
pub mod twin;
mod writer;

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::info;

pub use config::DeviceTwinConfig;
pub use devices::{DeviceCache, DeviceId};
pub use error::{Error, Result};
pub use handle::DeviceTwinHandle;
pub use mappers::{MapperRecord, Mappers};
pub use twin::{DeviceTwins, PropertyTwin, TwinDocument};

use reconcile::Reconciler;
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::StoreEvent;
use writer::{Op, TwinWriter};

/// Operations queued for the twin writer before callers wait.
const OPS_QUEUE: usize = 4096;
/// Capacity of the change broadcast ([`DeviceTwinHandle::subscribe`]).
const CHANGES: usize = 1024;
/// Registrations queued for the reconciler.
const REGISTRATIONS: usize = 64;

/// The devicetwin component; see the module docs.
#[derive(Debug)]
pub struct DeviceTwin {
    config: Arc<DeviceTwinConfig>,
    store: MetaStore,
    hub: EdgeHubHandle,
    events: broadcast::Receiver<StoreEvent>,
    devices: DeviceCache,
    ops: mpsc::Receiver<Op>,
    handle: DeviceTwinHandle,
    changes: broadcast::Sender<Arc<TwinDocument>>,
}

impl DeviceTwin {
    /// devicetwin over `store` (the metamanager's), reporting through `hub` and following
    /// the metamanager's committed changes `events` (subscribe before the metamanager
    /// runs). The handle works once [`run`](Self::run) runs.
    pub fn new(
        config: DeviceTwinConfig,
        store: MetaStore,
        hub: EdgeHubHandle,
        events: broadcast::Receiver<StoreEvent>,
    ) -> (Self, DeviceTwinHandle) {
        let (ops_tx, ops) = mpsc::channel(OPS_QUEUE);
        let changes = broadcast::channel(CHANGES).0;
        let handle = DeviceTwinHandle::new(ops_tx, changes.clone());
        let twin = Self {
            config: Arc::new(config),
            store,
            hub,
            events,
            devices: DeviceCache::default(),
            ops,
            handle: handle.clone(),
            changes,
        };
        (twin, handle)
    }

    /// The Devices and DeviceModels as devicetwin sees them.
    pub fn devices(&self) -> DeviceCache {
        self.devices.clone()
    }

    /// Loads devices, twins and mappers from the store, then runs the twin writer, the DMI
    /// server and the reconciler until `shutdown`.
    ///
    /// # Errors
    /// [`Socket`](error::Error::Socket) when the DMI socket cannot be bound (e.g. another
    /// edgecore serves it); store failures while loading.
    #[tracing::instrument(name = "devicetwin", skip_all)]
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let Self {
            config,
            store,
            hub,
            events,
            devices,
            ops,
            handle,
            changes,
        } = self;
        let (cache, hub_for_writer) = (devices.clone(), hub);
        let (writer, mappers) = store
            .blocking(move |s| {
                cache.relist(s)?;
                let writer = TwinWriter::new(s.clone(), hub_for_writer, cache, ops, changes)?;
                Ok::<_, crate::error::Error>((writer, Mappers::load(s)?))
            })
            .await?;
        let mode = config
            .socket_mode()
            .map_err(|(field, reason)| crate::error::Error::Config { field, reason })?;
        let (registrations_tx, registrations) = mpsc::channel(REGISTRATIONS);
        let server = dmi::server::DmiServer::new(
            &config,
            store.clone(),
            devices.clone(),
            mappers.clone(),
            handle.clone(),
            registrations_tx,
        );
        let reconciler = Reconciler {
            config: Arc::clone(&config),
            store,
            devices,
            mappers,
            twins: handle,
            events,
            traces: trace::DesiredTraces::default(),
            registrations,
        };
        // The writer outlives the server and the reconciler (they call it), and stops when
        // every handle is gone or on `shutdown`.
        let stop_writer = CancellationToken::new();
        let writer = verge_runtime::tasks::spawn("twin writer", writer.run(stop_writer.clone()));
        let local = shutdown.child_token();
        let reconciler =
            verge_runtime::tasks::spawn("twin reconciler", reconciler.run(local.clone()));
        let served = dmi::serve(&config.dmi_socket, mode, server, local.clone()).await;
        local.cancel();
        let _ = reconciler.await;
        stop_writer.cancel();
        let _ = writer.await;
        info!("devicetwin stopped");
        served
    }
}
