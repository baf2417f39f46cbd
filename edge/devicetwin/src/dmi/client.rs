//! [`MapperClient`]: calls to one mapper's `DeviceMapperService` at the socket path it
//! registered (a plain filesystem path, as KubeEdge mappers send it, not a URL).
//!
//! The channel connects lazily, on the first call and again after a failure: a mapper
//! starts its gRPC server only after its `MapperRegister` returned, so the first calls may
//! find no socket and are retried by the caller ([`super::super::reconcile`]). Each call,
//! connecting included, is bounded by `deviceTwin.mapperCallTimeout`.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use verge_proto::dmi::v1beta1 as dmi;
use verge_proto::dmi::v1beta1::device_mapper_service_client::DeviceMapperServiceClient;

use crate::error::Error;

/// A client of one mapper; cheap to clone.
#[derive(Debug, Clone)]
pub struct MapperClient {
    protocol: String,
    address: String,
    inner: DeviceMapperServiceClient<Channel>,
}

impl MapperClient {
    /// A client of the mapper serving `protocol` on the unix socket `address`; nothing is
    /// dialled yet.
    pub fn new(protocol: &str, address: &str, timeout: Duration) -> Self {
        let path = PathBuf::from(address);
        // The URI is never resolved: the connector dials `path`. Its authority
        // (`localhost`) is what the mapper sees, as for any unix-socket gRPC client.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                let path = path.clone();
                async move { UnixStream::connect(path).await.map(TokioIo::new) }
            }));
        Self {
            protocol: protocol.to_owned(),
            address: address.to_owned(),
            inner: DeviceMapperServiceClient::new(channel),
        }
    }

    /// The socket path.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn failed(&self, call: &'static str) -> impl FnOnce(tonic::Status) -> Error + '_ {
        move |source| Error::MapperCall {
            protocol: self.protocol.clone(),
            address: self.address.clone(),
            call,
            source,
        }
    }

    /// `CreateDeviceModel`.
    ///
    /// # Errors
    /// [`Error::MapperCall`] with the mapper's status (`UNAVAILABLE` when its socket cannot
    /// be reached).
    pub async fn create_model(&self, model: dmi::DeviceModel) -> Result<(), Error> {
        let request = dmi::CreateDeviceModelRequest { model: Some(model) };
        self.inner
            .clone()
            .create_device_model(request)
            .await
            .map_err(self.failed("CreateDeviceModel"))?;
        Ok(())
    }

    /// `UpdateDeviceModel`.
    ///
    /// # Errors
    /// As [`create_model`](Self::create_model).
    pub async fn update_model(&self, model: dmi::DeviceModel) -> Result<(), Error> {
        let request = dmi::UpdateDeviceModelRequest { model: Some(model) };
        self.inner
            .clone()
            .update_device_model(request)
            .await
            .map_err(self.failed("UpdateDeviceModel"))?;
        Ok(())
    }

    /// `RemoveDeviceModel` of `namespace/name`.
    ///
    /// # Errors
    /// As [`create_model`](Self::create_model).
    pub async fn remove_model(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let request = dmi::RemoveDeviceModelRequest {
            model_name: name.to_owned(),
            model_namespace: namespace.to_owned(),
        };
        self.inner
            .clone()
            .remove_device_model(request)
            .await
            .map_err(self.failed("RemoveDeviceModel"))?;
        Ok(())
    }

    /// `RegisterDevice`.
    ///
    /// # Errors
    /// As [`create_model`](Self::create_model).
    pub async fn register_device(&self, device: dmi::Device) -> Result<(), Error> {
        let request = dmi::RegisterDeviceRequest {
            device: Some(device),
        };
        self.inner
            .clone()
            .register_device(request)
            .await
            .map_err(self.failed("RegisterDevice"))?;
        Ok(())
    }

    /// `UpdateDevice`.
    ///
    /// # Errors
    /// As [`create_model`](Self::create_model).
    pub async fn update_device(&self, device: dmi::Device) -> Result<(), Error> {
        let request = dmi::UpdateDeviceRequest {
            device: Some(device),
        };
        self.inner
            .clone()
            .update_device(request)
            .await
            .map_err(self.failed("UpdateDevice"))?;
        Ok(())
    }

    /// `RemoveDevice` of `namespace/name`.
    ///
    /// # Errors
    /// As [`create_model`](Self::create_model).
    pub async fn remove_device(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let request = dmi::RemoveDeviceRequest {
            device_name: name.to_owned(),
            device_namespace: namespace.to_owned(),
        };
        self.inner
            .clone()
            .remove_device(request)
            .await
            .map_err(self.failed("RemoveDevice"))?;
        Ok(())
    }
}
