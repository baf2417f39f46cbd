//! The mapper's devices and models, keyed by `(namespace, name)` as mapper-framework keys
//! them (`<namespace>/<name>`); each device runs its own [`worker`] task.
//!
//! More forgiving than mapper-framework: registering a known device updates it, and a device
//! whose model is not (yet) known runs on its visitors' `configData` alone and picks the
//! model up when it arrives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, info_span, warn};
use verge_proto::dmi::v1beta1::{Device, DeviceModel, DeviceStatus, MapperRegisterResponse};

use crate::device::VirtualDevice;
use crate::edgecore::ManagerClient;
use crate::worker::{self, SharedDevice};

/// `(namespace, name)` of a device or model.
pub type Key = (String, String);

/// The devices and models this mapper holds; cheap to clone (shared).
#[derive(Clone)]
pub struct Mapper {
    inner: Arc<Inner>,
}

struct Inner {
    client: ManagerClient,
    stop: CancellationToken,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    models: HashMap<Key, DeviceModel>,
    devices: HashMap<Key, Running>,
}

struct Running {
    device: SharedDevice,
    wake: Arc<Notify>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Mapper {
    /// An empty mapper reporting through `client`; `stop` (cancelled at shutdown) stops every
    /// device worker.
    pub fn new(client: ManagerClient, stop: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                stop,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes MapperRegister's answer: every model, then every device.
    pub fn load(&self, response: MapperRegisterResponse) {
        for model in response.model_list {
            self.upsert_model(model);
        }
        for device in response.device_list {
            self.upsert_device(device);
        }
    }

    /// Stores a model (CreateDeviceModel / UpdateDeviceModel) and re-applies it to the
    /// devices referencing it.
    pub fn upsert_model(&self, model: DeviceModel) {
        let key = (model.namespace.clone(), model.name.clone());
        info!(namespace = key.0, model = key.1, "device model stored");
        let mut state = self.state();
        let now = Instant::now();
        for ((namespace, _), running) in &state.devices {
            let mut device = worker::lock(&running.device);
            if *namespace == key.0 && device.model_name() == key.1 {
                let current = device.device().clone();
                device.update(current, Some(&model), now);
                running.wake.notify_one();
            }
        }
        state.models.insert(key, model);
    }

    /// Forgets a model (RemoveDeviceModel); devices using it keep running as they are.
    /// Returns whether it was known.
    pub fn remove_model(&self, namespace: &str, name: &str) -> bool {
        let removed = self
            .state()
            .models
            .remove(&(namespace.to_owned(), name.to_owned()))
            .is_some();
        info!(namespace, model = name, removed, "device model removed");
        removed
    }

    /// Starts driving a device (RegisterDevice) or takes its new description (UpdateDevice):
    /// new desired values are applied at once and reported in the next report.
    pub fn upsert_device(&self, device: Device) {
        let key = (device.namespace.clone(), device.name.clone());
        let mut state = self.state();
        let model_name = device
            .spec
            .as_ref()
            .map_or("", |s| s.device_model_reference.as_str());
        let model = state
            .models
            .get(&(key.0.clone(), model_name.to_owned()))
            .cloned();
        if model.is_none() {
            warn!(
                namespace = key.0,
                device = key.1,
                model = model_name,
                "device model unknown; simulating from visitor configData alone"
            );
        }
        if let Some(running) = state.devices.get(&key) {
            worker::lock(&running.device).update(device, model.as_ref(), Instant::now());
            running.wake.notify_one();
            info!(namespace = key.0, device = key.1, "device updated");
            return;
        }
        let shared = Arc::new(Mutex::new(VirtualDevice::new(
            device,
            model.as_ref(),
            Instant::now(),
        )));
        let wake = Arc::new(Notify::new());
        let stop = self.inner.stop.child_token();
        let span = info_span!("device", namespace = key.0, device = key.1);
        let task = verge_runtime::tasks::spawn(
            "device worker",
            worker::run(
                shared.clone(),
                wake.clone(),
                stop.clone(),
                self.inner.client.clone(),
            )
            .instrument(span),
        );
        info!(namespace = key.0, device = key.1, "device registered");
        state.devices.insert(
            key,
            Running {
                device: shared,
                wake,
                stop,
                task,
            },
        );
    }

    /// Stops driving a device and forgets it (RemoveDevice). Returns whether it was known.
    pub fn remove_device(&self, namespace: &str, name: &str) -> bool {
        let running = self
            .state()
            .devices
            .remove(&(namespace.to_owned(), name.to_owned()));
        info!(
            namespace,
            device = name,
            removed = running.is_some(),
            "device removed"
        );
        running.map(|r| r.stop.cancel()).is_some()
    }

    /// The device as last received, with `status.twins` holding every property's current
    /// twin (GetDevice); `None` when unknown.
    pub fn get_device(&self, namespace: &str, name: &str) -> Option<Device> {
        let state = self.state();
        let running = state
            .devices
            .get(&(namespace.to_owned(), name.to_owned()))?;
        let device = worker::lock(&running.device);
        let mut out = device.device().clone();
        let status = out.status.get_or_insert_with(DeviceStatus::default);
        status.twins = device.twins();
        Some(out)
    }

    /// `(namespace, name)` of every device driven, sorted.
    pub fn device_keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.state().devices.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Stops every device worker and waits for them.
    pub async fn stop(&self) {
        self.inner.stop.cancel();
        let tasks: Vec<JoinHandle<()>> =
            self.state().devices.drain().map(|(_, r)| r.task).collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}
