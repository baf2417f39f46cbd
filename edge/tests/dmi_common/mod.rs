//! Playing a KubeEdge mapper against edgecore's DMI server: a DMI client that dials the
//! socket path and sends it as a percent-encoded `:authority`, as grpc-go mappers do, and
//! a fake mapper's `DeviceMapperService` (a fake of the mapper side, recording every call).

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hyper_util::rt::TokioIo;
use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use verge_proto::dmi::v1beta1 as dmi;
use verge_proto::dmi::v1beta1::device_manager_service_client::DeviceManagerServiceClient;
use verge_proto::dmi::v1beta1::device_mapper_service_server::{
    DeviceMapperService, DeviceMapperServiceServer,
};

pub const STEP: Duration = Duration::from_secs(10);

/// grpc-go's `:authority` for a target that is a plain socket path.
pub fn go_authority(path: &Path) -> String {
    path.display().to_string().replace('/', "%2F")
}

/// A DMI client on the socket at `path` whose requests carry `authority` as `:authority`.
pub fn dmi_client(path: &Path, authority: String) -> DeviceManagerServiceClient<Channel> {
    DeviceManagerServiceClient::new(forged_channel(path, authority))
}

/// A channel to the socket at `path` whose requests carry `authority` as `:authority`
/// (tonic itself cannot send one that is not a valid URI authority: a relay in the
/// connector rewrites its header blocks).
pub fn forged_channel(path: &Path, authority: String) -> Channel {
    let path = path.to_owned();
    Endpoint::from_static("http://localhost")
        .connect_timeout(STEP)
        .timeout(STEP)
        .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
            let (path, authority) = (path.clone(), authority.clone());
            async move {
                let socket = UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(forge_authority(socket, authority)))
            }
        }))
}

/// Relays a client connection to `socket`, replacing `:authority` in every header block
/// the client sends.
fn forge_authority(socket: UnixStream, authority: String) -> tokio::io::DuplexStream {
    let (client_end, relay_end) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (mut from_client, mut to_client) = tokio::io::split(relay_end);
        let (mut from_server, mut to_server) = socket.into_split();
        let up = async {
            let mut preface = [0u8; 24];
            from_client.read_exact(&mut preface).await?;
            to_server.write_all(&preface).await?;
            let (mut decoder, mut encoder) = (Decoder::new(), Encoder::new());
            loop {
                let mut head = [0u8; 9];
                from_client.read_exact(&mut head).await?;
                let len = (usize::from(head[0]) << 16)
                    | (usize::from(head[1]) << 8)
                    | usize::from(head[2]);
                let mut payload = vec![0u8; len];
                from_client.read_exact(&mut payload).await?;
                // tonic sends whole header blocks in one HEADERS frame, unpadded.
                if head[3] == 0x1 {
                    let mut headers = decoder
                        .decode(&payload)
                        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
                    for (name, value) in &mut headers {
                        if name.as_slice() == b":authority" {
                            *value = authority.as_bytes().to_vec();
                        }
                    }
                    payload =
                        encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
                    let len = payload.len();
                    head[0] = (len >> 16) as u8;
                    head[1] = (len >> 8) as u8;
                    head[2] = len as u8;
                }
                to_server.write_all(&head).await?;
                to_server.write_all(&payload).await?;
            }
            #[allow(unreachable_code)]
            Ok::<_, std::io::Error>(())
        };
        let down = tokio::io::copy(&mut from_server, &mut to_client);
        let _ = tokio::join!(up, down);
    });
    client_end
}

/// A call the fake mapper received.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    CreateModel(dmi::DeviceModel),
    UpdateModel(dmi::DeviceModel),
    RemoveModel(String),
    Register(dmi::Device),
    Update(dmi::Device),
    Remove(String),
}

impl Call {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateModel(_) => "CreateDeviceModel",
            Self::UpdateModel(_) => "UpdateDeviceModel",
            Self::RemoveModel(_) => "RemoveDeviceModel",
            Self::Register(_) => "RegisterDevice",
            Self::Update(_) => "UpdateDevice",
            Self::Remove(_) => "RemoveDevice",
        }
    }
}

struct FakeMapper {
    calls: mpsc::UnboundedSender<Call>,
}

impl FakeMapper {
    fn record(&self, call: Call) {
        let _ = self.calls.send(call);
    }
}

#[tonic::async_trait]
impl DeviceMapperService for FakeMapper {
    async fn register_device(
        &self,
        request: Request<dmi::RegisterDeviceRequest>,
    ) -> Result<Response<dmi::RegisterDeviceResponse>, Status> {
        let device = request.into_inner().device.unwrap_or_default();
        let name = device.name.clone();
        self.record(Call::Register(device));
        Ok(Response::new(dmi::RegisterDeviceResponse {
            device_name: name,
            device_namespace: String::new(),
        }))
    }

    async fn remove_device(
        &self,
        request: Request<dmi::RemoveDeviceRequest>,
    ) -> Result<Response<dmi::RemoveDeviceResponse>, Status> {
        let r = request.into_inner();
        self.record(Call::Remove(format!(
            "{}/{}",
            r.device_namespace, r.device_name
        )));
        Ok(Response::new(dmi::RemoveDeviceResponse {}))
    }

    async fn update_device(
        &self,
        request: Request<dmi::UpdateDeviceRequest>,
    ) -> Result<Response<dmi::UpdateDeviceResponse>, Status> {
        self.record(Call::Update(
            request.into_inner().device.unwrap_or_default(),
        ));
        Ok(Response::new(dmi::UpdateDeviceResponse {}))
    }

    async fn create_device_model(
        &self,
        request: Request<dmi::CreateDeviceModelRequest>,
    ) -> Result<Response<dmi::CreateDeviceModelResponse>, Status> {
        let model = request.into_inner().model.unwrap_or_default();
        let name = model.name.clone();
        self.record(Call::CreateModel(model));
        Ok(Response::new(dmi::CreateDeviceModelResponse {
            device_model_name: name,
            device_model_namespace: String::new(),
        }))
    }

    async fn remove_device_model(
        &self,
        request: Request<dmi::RemoveDeviceModelRequest>,
    ) -> Result<Response<dmi::RemoveDeviceModelResponse>, Status> {
        let r = request.into_inner();
        self.record(Call::RemoveModel(format!(
            "{}/{}",
            r.model_namespace, r.model_name
        )));
        Ok(Response::new(dmi::RemoveDeviceModelResponse {}))
    }

    async fn update_device_model(
        &self,
        request: Request<dmi::UpdateDeviceModelRequest>,
    ) -> Result<Response<dmi::UpdateDeviceModelResponse>, Status> {
        self.record(Call::UpdateModel(
            request.into_inner().model.unwrap_or_default(),
        ));
        Ok(Response::new(dmi::UpdateDeviceModelResponse {}))
    }

    async fn get_device(
        &self,
        _request: Request<dmi::GetDeviceRequest>,
    ) -> Result<Response<dmi::GetDeviceResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
}

/// A fake mapper serving `DeviceMapperService` on the unix socket `path` until `stop`.
pub fn serve_mapper(path: &Path, stop: CancellationToken) -> Result<mpsc::UnboundedReceiver<Call>> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    let (calls, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(DeviceMapperServiceServer::new(FakeMapper { calls }))
            .serve_with_incoming_shutdown(
                UnixListenerStream::new(listener),
                stop.cancelled_owned(),
            ),
    );
    Ok(rx)
}

/// The next call the mapper receives.
pub async fn next_call(calls: &mut mpsc::UnboundedReceiver<Call>) -> Result<Call> {
    match tokio::time::timeout(STEP, calls.recv()).await {
        Ok(Some(call)) => Ok(call),
        Ok(None) => bail!("mapper stopped"),
        Err(_) => bail!("no mapper call in time"),
    }
}

/// `MapperRegister` of a mapper for `protocol` serving on `address`.
pub fn register_request(
    protocol: &str,
    address: &Path,
    with_data: bool,
) -> dmi::MapperRegisterRequest {
    dmi::MapperRegisterRequest {
        with_data,
        mapper: Some(dmi::MapperInfo {
            name: format!("{protocol}-mapper"),
            version: "v1.0.0".into(),
            api_version: "v1beta1".into(),
            protocol: protocol.into(),
            address: address.display().to_string().into_bytes(),
            state: "OK".into(),
        }),
    }
}

/// A `ReportDeviceStatus` of one reported twin.
pub fn report(name: &str, property: &str, value: &str) -> dmi::ReportDeviceStatusRequest {
    dmi::ReportDeviceStatusRequest {
        device_name: name.into(),
        device_namespace: "ns".into(),
        reported_device: Some(dmi::DeviceStatus {
            twins: vec![dmi::Twin {
                property_name: property.into(),
                observed_desired: Some(dmi::TwinProperty::default()),
                reported: Some(dmi::TwinProperty {
                    value: value.into(),
                    metadata: [("type".to_owned(), "int".to_owned())].into(),
                }),
            }],
            report_to_cloud: true,
            report_cycle: 0,
        }),
    }
}
pub mod edge;
