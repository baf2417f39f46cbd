//! The reconciler: keeps the [`DeviceCache`] current from the metamanager's store events
//! (relisting on start and when it lagged behind), tells the twin writer about changed
//! Devices, and runs one `worker` per registered mapper that turns the cache into DMI
//! calls to that mapper.

mod desired;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::{Notify, broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, warn};
use verge_core::ResourceType;
use verge_runtime::ErrorChain;

pub use desired::{Desired, DesiredDevice, Sent};

use super::devices::{Change, DeviceCache, DeviceId};
use super::dmi::client::MapperClient;
use super::handle::DeviceTwinHandle;
use super::mappers::{MapperRecord, Mappers};
use super::state;
use super::trace::{self, DesiredTraces};
use crate::config::DeviceTwinConfig;
use verge_edge_store::MetaStore;
use verge_metamanager::StoreEvent;
use worker::Worker;

/// A mapper registered; `given` is what the registration's answer carried (`withData`).
#[derive(Debug)]
pub struct Registration {
    /// The mapper.
    pub mapper: MapperRecord,
    /// What it was given (empty without `withData`: it holds nothing).
    pub given: Sent,
}

/// A running worker.
struct Running {
    address: String,
    poke: Arc<Notify>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The reconciler component.
pub(super) struct Reconciler {
    pub(super) config: Arc<DeviceTwinConfig>,
    pub(super) store: MetaStore,
    pub(super) devices: DeviceCache,
    pub(super) mappers: Mappers,
    pub(super) twins: DeviceTwinHandle,
    pub(super) events: broadcast::Receiver<StoreEvent>,
    /// The traces of desired changes, for the mapper calls that carry them out.
    pub(super) traces: DesiredTraces,
    pub(super) registrations: mpsc::Receiver<Registration>,
}

impl Reconciler {
    /// Runs until `shutdown`: starts a worker per known mapper (with what it was given
    /// before, from redb), then follows store events and registrations.
    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        let mut workers: HashMap<String, Running> = HashMap::new();
        for mapper in self.mappers.all() {
            let (store, protocol) = (self.store.clone(), mapper.protocol.clone());
            let sent = store
                .blocking(move |s| state::load_sent(s, &protocol))
                .await
                .inspect_err(
                    |e| warn!(error = %ErrorChain(e), "record of what a mapper holds unreadable"),
                )
                .unwrap_or_default();
            self.start(&mut workers, mapper, sent, &shutdown);
        }
        let mut events_open = true;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                registration = self.registrations.recv() => match registration {
                    Some(r) => self.registered(&mut workers, r, &shutdown).await,
                    None => break,
                },
                event = self.events.recv(), if events_open => match event {
                    Ok(event) => self.changed(&workers, event).await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        warn!(missed, "store events missed; relisting devices");
                        self.relist(&workers).await;
                    }
                    // metamanager stopped: nothing changes any more.
                    Err(broadcast::error::RecvError::Closed) => events_open = false,
                },
            }
        }
        for (_, running) in workers.drain() {
            running.stop.cancel();
            let _ = running.task.await;
        }
        info!("device reconciler stopped");
    }

    fn start(
        &self,
        workers: &mut HashMap<String, Running>,
        mapper: MapperRecord,
        sent: Sent,
        shutdown: &CancellationToken,
    ) {
        let poke = Arc::new(Notify::new());
        let stop = shutdown.child_token();
        let worker = Worker {
            protocol: mapper.protocol.clone(),
            client: MapperClient::new(
                &mapper.protocol,
                &mapper.address,
                self.config.mapper_call_timeout,
            ),
            devices: self.devices.clone(),
            twins: self.twins.clone(),
            traces: self.traces.clone(),
            store: self.store.clone(),
            sent,
            poke: Arc::clone(&poke),
            backoff: (
                self.config.mapper_retry_backoff,
                self.config.mapper_retry_max_backoff,
            ),
            logged: BTreeMap::new(),
        };
        poke.notify_one();
        let task = verge_runtime::tasks::spawn("mapper worker", worker.run(stop.clone()));
        info!(protocol = %mapper.protocol, address = %mapper.address, mapper = %mapper.name, "serving devices through mapper");
        workers.insert(
            mapper.protocol,
            Running {
                address: mapper.address,
                poke,
                stop,
                task,
            },
        );
    }

    /// A (re)registration: the mapper holds what it was just given, nothing else; a new
    /// worker (new socket, fresh client) takes over.
    async fn registered(
        &self,
        workers: &mut HashMap<String, Running>,
        registration: Registration,
        shutdown: &CancellationToken,
    ) {
        let Registration { mapper, given } = registration;
        if let Some(old) = workers.remove(&mapper.protocol) {
            old.stop.cancel();
            let _ = old.task.await;
            if old.address != mapper.address {
                info!(protocol = %mapper.protocol, old = %old.address, new = %mapper.address, "mapper moved");
            }
        }
        let (store, protocol, sent) = (self.store.clone(), mapper.protocol.clone(), given.clone());
        if let Err(error) = store
            .blocking(move |s| state::put_sent(s, &protocol, &sent))
            .await
        {
            warn!(error = %ErrorChain(&error), "record of what a mapper holds not stored");
        }
        self.start(workers, mapper, given, shutdown);
    }

    async fn changed(&self, workers: &HashMap<String, Running>, event: StoreEvent) {
        if !matches!(
            event.key.kind,
            ResourceType::Device | ResourceType::DeviceModel
        ) {
            return;
        }
        let span = trace::desired_span(&event.key.to_string(), &event.trace);
        if event.key.kind == ResourceType::Device {
            // Before the cache has the change, so the mapper call that carries it out
            // (possibly in a pass already running) finds its trace.
            let id = DeviceId::of(&event.key);
            span.in_scope(|| self.traces.record_current(&id));
        }
        let (store, cache) = (self.store.clone(), self.devices.clone());
        let applied = store
            .blocking(move |s| cache.apply(s, &event))
            .instrument(span.clone())
            .await;
        match applied {
            Ok(Some(Change::Device(id))) => self.twins.sync(id).instrument(span).await,
            Ok(_) => {}
            Err(error) => {
                warn!(error = %ErrorChain(&error), "device store read failed; relisting");
                self.relist(workers).await;
                return;
            }
        }
        poke_all(workers);
    }

    async fn relist(&self, workers: &HashMap<String, Running>) {
        let (store, cache) = (self.store.clone(), self.devices.clone());
        if let Err(error) = store.blocking(move |s| cache.relist(s)).await {
            warn!(error = %ErrorChain(&error), "devices could not be relisted");
        }
        self.twins.sync_all().await;
        poke_all(workers);
    }
}

fn poke_all(workers: &HashMap<String, Running>) {
    for running in workers.values() {
        running.poke.notify_one();
    }
}
