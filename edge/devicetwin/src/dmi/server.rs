//! [`DmiServer`]: edgecore's `DeviceManagerService`, the calls mappers make.
//!
//! * `MapperRegister` records the mapper for its protocol (memory and redb) and, with
//!   `withData`, answers the Devices of that protocol with their models. It answers an
//!   error only for an invalid request (empty name, protocol or address): a KubeEdge mapper
//!   exits on an error. The reconciler then takes the mapper over (from what it was given).
//! * `ReportDeviceStatus` and `ReportDeviceStates` go through the twin logic
//!   ([`DeviceTwinHandle`]) and are answered OK only once committed; an unknown device,
//!   property or state is `INVALID_ARGUMENT` with a message naming it.
//! * Each mapper (by protocol) may send `mapperRequestRate` reports per second (burst
//!   `mapperRequestBurst`); beyond that a report is `RESOURCE_EXHAUSTED`. Registrations
//!   are not limited (an error would make the mapper exit).

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};
use verge_device_api::{Twin, TwinProperty};
use verge_proto::dmi::v1beta1 as dmi;
use verge_proto::dmi::v1beta1::device_manager_service_server::DeviceManagerService;
use verge_runtime::ErrorChain;

use crate::config::DeviceTwinConfig;
use crate::devices::{DeviceCache, DeviceId};
use crate::error::Error;
use crate::handle::DeviceTwinHandle;
use crate::mappers::{MapperRecord, Mappers};
use crate::reconcile::{Desired, Registration};
use verge_edge_store::MetaStore;

/// The namespace of a report that names none (mappers older than the namespace fields).
const DEFAULT_NAMESPACE: &str = "default";

/// The DMI server's state; see the module docs.
pub struct DmiServer {
    store: MetaStore,
    devices: DeviceCache,
    mappers: Mappers,
    twins: DeviceTwinHandle,
    registrations: mpsc::Sender<Registration>,
    limiter: DefaultKeyedRateLimiter<String>,
    rate: (u32, u32),
}

impl DmiServer {
    /// A server over devicetwin's parts.
    pub(crate) fn new(
        config: &DeviceTwinConfig,
        store: MetaStore,
        devices: DeviceCache,
        mappers: Mappers,
        twins: DeviceTwinHandle,
        registrations: mpsc::Sender<Registration>,
    ) -> Self {
        let rate = NonZeroU32::new(config.mapper_request_rate).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(config.mapper_request_burst).unwrap_or(NonZeroU32::MIN);
        Self {
            store,
            devices,
            mappers,
            twins,
            registrations,
            limiter: RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)),
            rate: (rate.get(), burst.get()),
        }
    }

    /// Admits one request of the mapper serving `protocol` (`""`: a request that cannot be
    /// attributed to a registered mapper shares one budget).
    fn admit(&self, protocol: &str, what: &str) -> Result<(), Status> {
        let key = if self.mappers.get(protocol).is_some() {
            protocol.to_owned()
        } else {
            String::new()
        };
        self.limiter.check_key(&key).map_err(|_| {
            Status::resource_exhausted(format!(
                "{what}: the mapper of protocol {protocol:?} sends more than {} requests/s \
                 (burst {}); slow down",
                self.rate.0, self.rate.1
            ))
        })
    }

    /// The protocol of the Device `id` (`""` if unknown), for rate limiting.
    fn protocol_of(&self, id: &DeviceId) -> String {
        self.devices
            .device(id)
            .map(|d| d.protocol().to_owned())
            .unwrap_or_default()
    }
}

/// `namespace/name` of a report; the default namespace when the mapper sends none.
fn device_id(namespace: &str, name: &str) -> Result<DeviceId, Status> {
    if name.is_empty() {
        return Err(status(&Error::EmptyField {
            field: "deviceName",
        }));
    }
    let namespace = if namespace.is_empty() {
        DEFAULT_NAMESPACE
    } else {
        namespace
    };
    Ok(DeviceId::new(namespace, name))
}

/// The gRPC status of a devicetwin failure: the caller's mistakes are `INVALID_ARGUMENT`,
/// a stopping edgecore `UNAVAILABLE`, anything else `INTERNAL`; the message is the cause
/// chain.
pub fn status(error: &crate::error::Error) -> Status {
    let message = ErrorChain(error).to_string();
    match error {
        Error::UnknownDevice { .. }
        | Error::UnknownProperty { .. }
        | Error::NoTwins { .. }
        | Error::ValueTooLarge { .. }
        | Error::InvalidState { .. }
        | Error::EmptyField { .. } => Status::invalid_argument(message),
        Error::Stopped | Error::NotStored(_) => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

fn twin_property(p: dmi::TwinProperty) -> TwinProperty {
    TwinProperty {
        value: p.value,
        metadata: p.metadata.into_iter().collect(),
    }
}

#[tonic::async_trait]
impl DeviceManagerService for DmiServer {
    async fn mapper_register(
        &self,
        request: Request<dmi::MapperRegisterRequest>,
    ) -> Result<Response<dmi::MapperRegisterResponse>, Status> {
        let request = request.into_inner();
        let mapper = request.mapper.unwrap_or_default();
        let empty = |field| status(&Error::EmptyField { field });
        if mapper.name.is_empty() {
            return Err(empty("mapper.name"));
        }
        if mapper.protocol.is_empty() {
            return Err(empty("mapper.protocol"));
        }
        let Ok(address) = String::from_utf8(mapper.address) else {
            return Err(Status::invalid_argument(
                "invalid request: mapper.address is not a UTF-8 socket path",
            ));
        };
        if address.is_empty() {
            return Err(empty("mapper.address"));
        }
        let record = MapperRecord {
            name: mapper.name,
            version: mapper.version,
            api_version: mapper.api_version,
            protocol: mapper.protocol,
            address,
            state: mapper.state,
        };
        info!(mapper = %record.name, protocol = %record.protocol, address = %record.address,
            with_data = request.with_data, "mapper registered");
        let (store, mappers, r) = (self.store.clone(), self.mappers.clone(), record.clone());
        if let Err(error) = store.blocking(move |s| mappers.register(s, r)).await {
            warn!(error = %ErrorChain(&error), mapper = %record.name,
                "mapper not remembered across restarts (served all the same)");
        }
        let (device_list, model_list, given) = if request.with_data {
            let desired = Desired::of(&record.protocol, &self.devices.snapshot());
            for (id, _, error) in &desired.invalid {
                warn!(device = %id, error = %ErrorChain(error), "device not given to its mapper");
            }
            desired.messages(&self.twins).await
        } else {
            Default::default()
        };
        debug!(
            devices = device_list.len(),
            models = model_list.len(),
            "answering registration"
        );
        let registration = Registration {
            mapper: record,
            given,
        };
        // A stopping reconciler needs no registration.
        let _ = self.registrations.send(registration).await;
        Ok(Response::new(dmi::MapperRegisterResponse {
            model_list,
            device_list,
        }))
    }

    async fn report_device_status(
        &self,
        request: Request<dmi::ReportDeviceStatusRequest>,
    ) -> Result<Response<dmi::ReportDeviceStatusResponse>, Status> {
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        self.admit(&self.protocol_of(&id), "ReportDeviceStatus")?;
        let twins: Vec<Twin> = request
            .reported_device
            .map(|d| d.twins)
            .unwrap_or_default()
            .into_iter()
            .map(|t| Twin {
                property_name: t.property_name,
                reported: t.reported.map(twin_property),
                observed_desired: t.observed_desired.map(twin_property),
            })
            .collect();
        self.twins
            .report(&id.namespace, &id.name, twins)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(dmi::ReportDeviceStatusResponse {}))
    }

    async fn report_device_states(
        &self,
        request: Request<dmi::ReportDeviceStatesRequest>,
    ) -> Result<Response<dmi::ReportDeviceStatesResponse>, Status> {
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        self.admit(&self.protocol_of(&id), "ReportDeviceStates")?;
        if request.state.is_empty() {
            return Err(status(&Error::EmptyField { field: "state" }));
        }
        self.twins
            .set_state(&id.namespace, &id.name, &request.state)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(dmi::ReportDeviceStatesResponse {}))
    }
}

impl std::fmt::Debug for DmiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmiServer").finish_non_exhaustive()
    }
}

/// Wraps `server` for tonic.
pub fn service(
    server: DmiServer,
) -> verge_proto::dmi::v1beta1::device_manager_service_server::DeviceManagerServiceServer<DmiServer>
{
    verge_proto::dmi::v1beta1::device_manager_service_server::DeviceManagerServiceServer::from_arc(
        Arc::new(server),
    )
}
