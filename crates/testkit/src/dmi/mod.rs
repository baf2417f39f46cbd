//! A stand-in for edgecore's DMI server in mapper tests, and sample DMI objects.
//!
//! [`FakeEdgecore`] serves DeviceManagerService on a unix socket through
//! `verge_runtime::unix_grpc::incoming`, so Go mappers (grpc-go sends the socket path as
//! `:authority`) reach it as they reach edgecore. It answers MapperRegister with a fixed
//! [`MapperRegisterResponse`], records every call, and refuses what edgecore refuses (an
//! empty protocol, a status report without twins, a state report without state or name).
//! It is a fake of Verge's own side; the mapper under test is real.

mod samples;

pub use samples::{any_float, any_string, thermometer_device, thermometer_model};

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};
use verge_proto::dmi::v1beta1::device_manager_service_server::{
    DeviceManagerService, DeviceManagerServiceServer,
};
use verge_proto::dmi::v1beta1::device_mapper_service_client::DeviceMapperServiceClient;
use verge_proto::dmi::v1beta1::{
    MapperRegisterRequest, MapperRegisterResponse, ReportDeviceStatesRequest,
    ReportDeviceStatesResponse, ReportDeviceStatusRequest, ReportDeviceStatusResponse,
};

/// One call a mapper made, as received (refused calls included).
#[derive(Debug, Clone, PartialEq)]
pub enum DmiCall {
    /// MapperRegister.
    Register(MapperRegisterRequest),
    /// ReportDeviceStatus.
    Status(ReportDeviceStatusRequest),
    /// ReportDeviceStates.
    States(ReportDeviceStatesRequest),
}

/// DeviceManagerService on a unix socket, recording calls; stopped (and its socket
/// removed) on drop.
#[derive(Debug)]
pub struct FakeEdgecore {
    socket: PathBuf,
    calls: mpsc::UnboundedReceiver<DmiCall>,
    stop: CancellationToken,
}

struct Service {
    answer: MapperRegisterResponse,
    calls: mpsc::UnboundedSender<DmiCall>,
}

impl FakeEdgecore {
    /// Binds `socket` (replacing a stale file) and serves; MapperRegister is answered with
    /// `answer` whatever the protocol.
    ///
    /// # Errors
    /// The socket cannot be bound.
    pub fn start(socket: &Path, answer: MapperRegisterResponse) -> anyhow::Result<Self> {
        let _ = std::fs::remove_file(socket);
        let listener =
            UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
        let (tx, calls) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let server = tonic::transport::Server::builder()
            .add_service(DeviceManagerServiceServer::new(Service {
                answer,
                calls: tx,
            }))
            .serve_with_incoming_shutdown(
                verge_runtime::unix_grpc::incoming(listener),
                stop.clone().cancelled_owned(),
            );
        tokio::spawn(async move {
            if let Err(error) = server.await {
                tracing::error!(%error, "fake edgecore failed");
            }
        });
        Ok(Self {
            socket: socket.to_owned(),
            calls,
            stop,
        })
    }

    /// The socket served.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The next call, waiting at most `timeout`.
    ///
    /// # Errors
    /// None arrived in time.
    pub async fn next_call(&mut self, timeout: Duration) -> anyhow::Result<DmiCall> {
        match tokio::time::timeout(timeout, self.calls.recv()).await {
            Ok(Some(call)) => Ok(call),
            Ok(None) => bail!("fake edgecore stopped"),
            Err(_) => bail!("no DMI call within {timeout:?}"),
        }
    }

    /// Skips calls until `pick` returns `Some` for one, waiting at most `timeout` in all.
    ///
    /// # Errors
    /// No call matched in time (the message names `what` and the last call seen).
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pick: impl FnMut(&DmiCall) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let call = match self.next_call(left).await {
                Ok(call) => call,
                Err(error) => bail!("waiting for {what}: {error}; last call: {last:?}"),
            };
            if let Some(found) = pick(&call) {
                return Ok(found);
            }
            last = Some(call);
        }
    }

    /// Every call received so far and not yet taken.
    pub fn drain(&mut self) -> Vec<DmiCall> {
        std::iter::from_fn(|| self.calls.try_recv().ok()).collect()
    }
}

impl Drop for FakeEdgecore {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[tonic::async_trait]
impl DeviceManagerService for Service {
    async fn mapper_register(
        &self,
        request: Request<MapperRegisterRequest>,
    ) -> Result<Response<MapperRegisterResponse>, Status> {
        let request = request.into_inner();
        let _ = self.calls.send(DmiCall::Register(request.clone()));
        if request
            .mapper
            .as_ref()
            .is_none_or(|m| m.protocol.is_empty())
        {
            return Err(Status::invalid_argument("mapper protocol is empty"));
        }
        Ok(Response::new(self.answer.clone()))
    }

    async fn report_device_status(
        &self,
        request: Request<ReportDeviceStatusRequest>,
    ) -> Result<Response<ReportDeviceStatusResponse>, Status> {
        let request = request.into_inner();
        let _ = self.calls.send(DmiCall::Status(request.clone()));
        if request
            .reported_device
            .as_ref()
            .is_none_or(|d| d.twins.is_empty())
        {
            return Err(Status::invalid_argument("reported device has no twins"));
        }
        Ok(Response::new(ReportDeviceStatusResponse {}))
    }

    async fn report_device_states(
        &self,
        request: Request<ReportDeviceStatesRequest>,
    ) -> Result<Response<ReportDeviceStatesResponse>, Status> {
        let request = request.into_inner();
        let _ = self.calls.send(DmiCall::States(request.clone()));
        if request.state.is_empty() || request.device_name.is_empty() {
            return Err(Status::invalid_argument(
                "device name and state are required",
            ));
        }
        Ok(Response::new(ReportDeviceStatesResponse {}))
    }
}

/// A DeviceMapperService client of the mapper serving `socket` (edgecore's side of the
/// downstream calls); nothing is dialled until the first call.
pub fn mapper_client(socket: &Path) -> DeviceMapperServiceClient<Channel> {
    let socket = socket.to_owned();
    let channel = Endpoint::from_static("http://localhost")
        .timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }));
    DeviceMapperServiceClient::new(channel)
}
