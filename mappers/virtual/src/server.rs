//! DeviceMapperService, served to edgecore on the mapper's unix socket.
//!
//! Answers follow KubeEdge's mapper-framework: RegisterDevice answers the device's name and
//! namespace, CreateDeviceModel the model's; GetDevice returns the device with
//! `status.twins` read live. A request without a device (or model) name is
//! `INVALID_ARGUMENT`; GetDevice of an unknown device is `NOT_FOUND`; removing an unknown
//! device or model succeeds (it is gone either way).

use std::io;
use std::path::Path;

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::info;
use verge_proto::dmi::v1beta1::device_mapper_service_server::{
    DeviceMapperService, DeviceMapperServiceServer,
};
use verge_proto::dmi::v1beta1::{
    CreateDeviceModelRequest, CreateDeviceModelResponse, Device, DeviceModel, GetDeviceRequest,
    GetDeviceResponse, RegisterDeviceRequest, RegisterDeviceResponse, RemoveDeviceModelRequest,
    RemoveDeviceModelResponse, RemoveDeviceRequest, RemoveDeviceResponse, UpdateDeviceModelRequest,
    UpdateDeviceModelResponse, UpdateDeviceRequest, UpdateDeviceResponse,
};

use crate::mapper::Mapper;

/// Binds `path`, creating its directory and replacing a stale socket file left by an
/// earlier run (as mapper-framework does).
///
/// # Errors
/// The directory cannot be created, the old file removed, or the socket bound.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    UnixListener::bind(path)
}

/// Serves DeviceMapperService for `mapper` on `listener` until `shutdown` fires. Connections
/// go through `verge_runtime::unix_grpc`, so clients that send the socket path as
/// `:authority` (grpc-go dialling a plain path, as KubeEdge's edgecore does) are served too.
///
/// # Errors
/// The server fails (tonic's transport error).
pub async fn serve(
    listener: UnixListener,
    mapper: Mapper,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(DeviceMapperServiceServer::new(Service(mapper)))
        .serve_with_incoming_shutdown(
            verge_runtime::unix_grpc::incoming(listener),
            shutdown.cancelled_owned(),
        )
        .await
}

/// The gRPC handlers over a [`Mapper`].
struct Service(Mapper);

fn device(device: Option<Device>, rpc: &str) -> Result<Device, Status> {
    match device {
        Some(d) if !d.name.is_empty() => Ok(d),
        _ => Err(Status::invalid_argument(format!(
            "{rpc}: device with a name is required"
        ))),
    }
}

fn model(model: Option<DeviceModel>, rpc: &str) -> Result<DeviceModel, Status> {
    match model {
        Some(m) if !m.name.is_empty() => Ok(m),
        _ => Err(Status::invalid_argument(format!(
            "{rpc}: model with a name is required"
        ))),
    }
}

fn name_required(name: &str, rpc: &str) -> Result<(), Status> {
    if name.is_empty() {
        Err(Status::invalid_argument(format!(
            "{rpc}: a name is required"
        )))
    } else {
        Ok(())
    }
}

#[tonic::async_trait]
impl DeviceMapperService for Service {
    async fn register_device(
        &self,
        request: Request<RegisterDeviceRequest>,
    ) -> Result<Response<RegisterDeviceResponse>, Status> {
        let device = device(request.into_inner().device, "RegisterDevice")?;
        info!(
            rpc = "RegisterDevice",
            namespace = device.namespace,
            device = device.name,
            "called"
        );
        let response = RegisterDeviceResponse {
            device_name: device.name.clone(),
            device_namespace: device.namespace.clone(),
        };
        self.0.upsert_device(device);
        Ok(Response::new(response))
    }

    async fn remove_device(
        &self,
        request: Request<RemoveDeviceRequest>,
    ) -> Result<Response<RemoveDeviceResponse>, Status> {
        let request = request.into_inner();
        name_required(&request.device_name, "RemoveDevice")?;
        info!(
            rpc = "RemoveDevice",
            namespace = request.device_namespace,
            device = request.device_name,
            "called"
        );
        self.0
            .remove_device(&request.device_namespace, &request.device_name);
        Ok(Response::new(RemoveDeviceResponse {}))
    }

    async fn update_device(
        &self,
        request: Request<UpdateDeviceRequest>,
    ) -> Result<Response<UpdateDeviceResponse>, Status> {
        let device = device(request.into_inner().device, "UpdateDevice")?;
        info!(
            rpc = "UpdateDevice",
            namespace = device.namespace,
            device = device.name,
            "called"
        );
        self.0.upsert_device(device);
        Ok(Response::new(UpdateDeviceResponse {}))
    }

    async fn create_device_model(
        &self,
        request: Request<CreateDeviceModelRequest>,
    ) -> Result<Response<CreateDeviceModelResponse>, Status> {
        let model = model(request.into_inner().model, "CreateDeviceModel")?;
        info!(
            rpc = "CreateDeviceModel",
            namespace = model.namespace,
            model = model.name,
            "called"
        );
        let response = CreateDeviceModelResponse {
            device_model_name: model.name.clone(),
            device_model_namespace: model.namespace.clone(),
        };
        self.0.upsert_model(model);
        Ok(Response::new(response))
    }

    async fn remove_device_model(
        &self,
        request: Request<RemoveDeviceModelRequest>,
    ) -> Result<Response<RemoveDeviceModelResponse>, Status> {
        let request = request.into_inner();
        name_required(&request.model_name, "RemoveDeviceModel")?;
        info!(
            rpc = "RemoveDeviceModel",
            namespace = request.model_namespace,
            model = request.model_name,
            "called"
        );
        self.0
            .remove_model(&request.model_namespace, &request.model_name);
        Ok(Response::new(RemoveDeviceModelResponse {}))
    }

    async fn update_device_model(
        &self,
        request: Request<UpdateDeviceModelRequest>,
    ) -> Result<Response<UpdateDeviceModelResponse>, Status> {
        let model = model(request.into_inner().model, "UpdateDeviceModel")?;
        info!(
            rpc = "UpdateDeviceModel",
            namespace = model.namespace,
            model = model.name,
            "called"
        );
        self.0.upsert_model(model);
        Ok(Response::new(UpdateDeviceModelResponse {}))
    }

    async fn get_device(
        &self,
        request: Request<GetDeviceRequest>,
    ) -> Result<Response<GetDeviceResponse>, Status> {
        let request = request.into_inner();
        name_required(&request.device_name, "GetDevice")?;
        info!(
            rpc = "GetDevice",
            namespace = request.device_namespace,
            device = request.device_name,
            "called"
        );
        let device = self
            .0
            .get_device(&request.device_namespace, &request.device_name)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "device {}/{} is not registered",
                    request.device_namespace, request.device_name
                ))
            })?;
        Ok(Response::new(GetDeviceResponse {
            device: Some(device),
        }))
    }
}
