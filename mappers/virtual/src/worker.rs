//! One task per device: waits for the next due collection or report, polls the
//! [`VirtualDevice`], and sends what is due to edgecore (ReportDeviceStatus with the due
//! twins, ReportDeviceStates with `online`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::SeedableRng as _;
use rand::rngs::StdRng;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_proto::dmi::v1beta1::{
    DeviceStatus, ReportDeviceStatesRequest, ReportDeviceStatusRequest, Twin,
};

use crate::device::VirtualDevice;
use crate::edgecore::ManagerClient;

/// The state this mapper reports for every device it drives.
pub const STATE_ONLINE: &str = "online";

/// A device shared between its worker and the gRPC handlers.
pub type SharedDevice = Arc<Mutex<VirtualDevice>>;

/// Locks `device`; a poisoned lock (a panicked holder) is taken over, the state stays usable.
pub fn lock(device: &SharedDevice) -> MutexGuard<'_, VirtualDevice> {
    device.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drives `device` until `stop` fires; `wake` makes it re-read the schedule (after an update).
pub async fn run(
    device: SharedDevice,
    wake: Arc<Notify>,
    stop: CancellationToken,
    client: ManagerClient,
) {
    let mut rng = StdRng::from_rng(&mut rand::rng());
    let mut reporter = Reporter {
        client,
        failing: false,
    };
    loop {
        let deadline = lock(&device).next_deadline();
        tokio::select! {
            () = stop.cancelled() => break,
            () = wake.notified() => continue,
            () = tokio::time::sleep_until(deadline) => {}
        }
        let (due, namespace, name, status) = {
            let mut d = lock(&device);
            let due = d.poll(Instant::now(), &mut rng);
            let dev = d.device();
            (
                due,
                dev.namespace.clone(),
                dev.name.clone(),
                dev.status.clone().unwrap_or_default(),
            )
        };
        if !due.twins.is_empty() {
            reporter.status(&namespace, &name, &status, due.twins).await;
        }
        if due.state {
            reporter.state(&namespace, &name).await;
        }
    }
    debug!("device worker stopped");
}

/// Sends reports, logging a failure at `warn` when calls start failing and at `debug` while
/// they keep failing.
struct Reporter {
    client: ManagerClient,
    failing: bool,
}

impl Reporter {
    async fn status(
        &mut self,
        namespace: &str,
        name: &str,
        status: &DeviceStatus,
        twins: Vec<Twin>,
    ) {
        for twin in &twins {
            debug!(
                namespace,
                device = name,
                property = twin.property_name,
                reported = twin.reported.as_ref().map_or("", |r| r.value.as_str()),
                observed_desired = twin
                    .observed_desired
                    .as_ref()
                    .map_or("", |r| r.value.as_str()),
                "reporting twin"
            );
        }
        let request = ReportDeviceStatusRequest {
            device_name: name.to_owned(),
            device_namespace: namespace.to_owned(),
            reported_device: Some(DeviceStatus {
                twins,
                report_to_cloud: status.report_to_cloud,
                report_cycle: status.report_cycle,
            }),
        };
        let result = self.client.report_device_status(request).await.map(drop);
        self.outcome("ReportDeviceStatus", namespace, name, result);
    }

    async fn state(&mut self, namespace: &str, name: &str) {
        let request = ReportDeviceStatesRequest {
            device_name: name.to_owned(),
            device_namespace: namespace.to_owned(),
            state: STATE_ONLINE.to_owned(),
        };
        debug!(
            namespace,
            device = name,
            state = STATE_ONLINE,
            "reporting state"
        );
        let result = self.client.report_device_states(request).await.map(drop);
        self.outcome("ReportDeviceStates", namespace, name, result);
    }

    fn outcome(
        &mut self,
        rpc: &str,
        namespace: &str,
        name: &str,
        result: Result<(), tonic::Status>,
    ) {
        match result {
            Ok(()) => {
                if self.failing {
                    info!(
                        rpc,
                        namespace,
                        device = name,
                        "reports reach edgecore again"
                    );
                }
                self.failing = false;
            }
            Err(status) if self.failing => {
                debug!(rpc, namespace, device = name, code = ?status.code(), message = status.message(), "report failed");
            }
            Err(status) => {
                self.failing = true;
                warn!(rpc, namespace, device = name, code = ?status.code(), message = status.message(), "report failed");
            }
        }
    }
}
