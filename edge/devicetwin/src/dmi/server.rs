//! [`DmiServer`]: edgecore's `DeviceManagerService`, the calls mappers make.
//!
//! * `MapperRegister` records the mapper for its protocol (memory and redb) and, with
//!   `withData`, answers the Devices of that protocol with their models. The reconciler
//!   then takes the mapper over (from what it was given). Refused: an invalid request
//!   (empty name, protocol or address; `INVALID_ARGUMENT`), a mapper socket outside
//!   `deviceTwin.mapperSocketDir` (`INVALID_ARGUMENT`), a protocol another running process
//!   registered (`PERMISSION_DENIED`, unless in `deviceTwin.sharedProtocols`), a protocol
//!   beyond `deviceTwin.maxMappers` (`RESOURCE_EXHAUSTED`). The registering process is the
//!   socket's peer ([`PeerCredentials`]); a connection without them is `UNAUTHENTICATED`.
//! * `ReportDeviceStatus` and `ReportDeviceStates` go through the twin logic
//!   ([`DeviceTwinHandle`]) and are answered OK only once committed; an unknown device,
//!   property or state is `INVALID_ARGUMENT` with a message naming it. Only the process
//!   that registered the device's protocol may report for it (`PERMISSION_DENIED`).
//! * Each mapper (by protocol) may send `mapperRequestRate` reports per second (burst
//!   `mapperRequestBurst`); beyond that a report is `RESOURCE_EXHAUSTED`. Registrations
//!   are bounded by `deviceTwin.maxMappers` protocols.

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
use verge_runtime::unix_grpc::PeerCredentials;

use crate::config::DeviceTwinConfig;
use crate::devices::{DeviceCache, DeviceId};
use crate::error::Error;
use crate::handle::DeviceTwinHandle;
use crate::mappers::{MapperOwner, MapperRecord, Mappers};
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
    socket_dir: std::path::PathBuf,
    max_mappers: usize,
    shared_protocols: Vec<String>,
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
            socket_dir: config.mapper_socket_dir(),
            max_mappers: config.max_mappers,
            shared_protocols: config.shared_protocols.clone(),
        }
    }

    /// Whether the registration of `protocol` by `owner` may replace `existing` (see the
    /// module docs); the refusal otherwise.
    fn may_register(
        &self,
        protocol: &str,
        owner: &MapperOwner,
        existing: Option<&MapperRecord>,
    ) -> Result<(), Status> {
        match existing {
            None if self.mappers.len() >= self.max_mappers => {
                Err(Status::resource_exhausted(format!(
                    "{} protocols are registered, deviceTwin.maxMappers; protocol {protocol:?} is refused",
                    self.mappers.len()
                )))
            }
            Some(MapperRecord {
                owner: Some(current),
                ..
            }) if current.pid != owner.pid
                && current.is_running()
                && !self.shared_protocols.iter().any(|p| p == protocol) =>
            {
                Err(Status::permission_denied(format!(
                    "protocol {protocol:?} is registered by process {} (uid {}), which still runs;                      another process may not take it over (deviceTwin.sharedProtocols allows it)",
                    current.pid, current.uid
                )))
            }
            _ => Ok(()),
        }
    }

    /// Admits a report for a device of `protocol` from `peer`: only the owner of the
    /// protocol's registration reports for its devices (a registration stored without an
    /// owner, or a device of no registered protocol, is left to the twin checks).
    fn check_reporter(&self, protocol: &str, peer: PeerCredentials) -> Result<(), Status> {
        let Some(MapperRecord {
            owner: Some(owner), ..
        }) = self.mappers.get(protocol)
        else {
            return Ok(());
        };
        if peer.pid == Some(owner.pid) && peer.uid == owner.uid
            || self.shared_protocols.iter().any(|p| p == protocol)
        {
            return Ok(());
        }
        Err(Status::permission_denied(format!(
            "the devices of protocol {protocol:?} are reported by the process that registered it ({}), not by process {:?}",
            owner.pid, peer.pid
        )))
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

/// The kernel's credentials of the request's client ([`PeerCredentials`], set by the DMI
/// socket's relay).
fn peer<T>(request: &Request<T>) -> Result<PeerCredentials, Status> {
    request
        .extensions()
        .get::<PeerCredentials>()
        .copied()
        .ok_or_else(|| Status::unauthenticated("the DMI connection carries no peer credentials"))
}

/// Checks that a mapper's socket `address` is an absolute path in `dir` (no `..`, no other
/// directory): edgecore dials it, so a registration must not point at another service.
fn check_socket_address(address: &str, dir: &std::path::Path) -> Result<(), Status> {
    use std::path::{Component, Path};
    let path = Path::new(address);
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain && path.parent() == Some(dir) {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "invalid request: mapper.address {address:?} is not a socket in {} (deviceTwin.mapperSocketDir)",
        dir.display()
    )))
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
        let peer = peer(&request)?;
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
        check_socket_address(&address, &self.socket_dir)?;
        let owner = peer
            .pid
            .and_then(|pid| MapperOwner::of(pid, peer.uid))
            .ok_or_else(|| {
                Status::unauthenticated(
                    "the registering process cannot be identified (no pid from the DMI socket)",
                )
            })?;
        if let Err(refused) = self.may_register(
            &mapper.protocol,
            &owner,
            self.mappers.get(&mapper.protocol).as_ref(),
        ) {
            warn!(mapper = %mapper.name, protocol = %mapper.protocol, pid = owner.pid,
                uid = owner.uid, reason = refused.message(), "mapper registration refused");
            return Err(refused);
        }
        let record = MapperRecord {
            name: mapper.name,
            version: mapper.version,
            api_version: mapper.api_version,
            protocol: mapper.protocol,
            address,
            state: mapper.state,
            owner: Some(owner),
        };
        info!(mapper = %record.name, protocol = %record.protocol, address = %record.address,
            pid = owner.pid, uid = owner.uid, with_data = request.with_data, "mapper registered");
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
        let peer = peer(&request)?;
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        let protocol = self.protocol_of(&id);
        self.admit(&protocol, "ReportDeviceStatus")?;
        self.check_reporter(&protocol, peer)?;
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
        let peer = peer(&request)?;
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        let protocol = self.protocol_of(&id);
        self.admit(&protocol, "ReportDeviceStates")?;
        self.check_reporter(&protocol, peer)?;
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
