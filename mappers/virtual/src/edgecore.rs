//! The client side towards edgecore: DeviceManagerService on edgecore's DMI socket.
//!
//! The socket is dialled as a plain filesystem path (the `http://localhost` URI only names
//! the HTTP/2 `:authority`), on a lazily connected channel that reconnects by itself; every
//! call has [`Config::call_timeout`] as its deadline.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::{info, warn};
use verge_proto::dmi::v1beta1::device_manager_service_client::DeviceManagerServiceClient;
use verge_proto::dmi::v1beta1::{MapperInfo, MapperRegisterRequest, MapperRegisterResponse};

use crate::Config;

/// A DeviceManagerService client on edgecore's DMI socket.
pub type ManagerClient = DeviceManagerServiceClient<Channel>;

/// `MapperInfo.api_version` this mapper sends: the DMI version it speaks.
pub const API_VERSION: &str = "v1beta1";

/// A client of edgecore's DeviceManagerService at `socket`; nothing is dialled until the
/// first call. `timeout` bounds every call and every connection attempt.
pub fn client(socket: &Path, timeout: Duration) -> ManagerClient {
    let socket = socket.to_owned();
    let channel = Endpoint::from_static("http://localhost")
        .timeout(timeout)
        .connect_timeout(timeout)
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }));
    DeviceManagerServiceClient::new(channel)
}

/// The registration this mapper sends: `withData`, its name, version, [`API_VERSION`],
/// protocol, its socket path's bytes as `address` and state `OK`, as KubeEdge's
/// mapper-framework does.
pub fn register_request(config: &Config) -> MapperRegisterRequest {
    MapperRegisterRequest {
        with_data: true,
        mapper: Some(MapperInfo {
            name: config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            api_version: API_VERSION.to_owned(),
            protocol: config.protocol.clone(),
            address: config.socket.as_os_str().as_bytes().to_vec(),
            state: "OK".to_owned(),
        }),
    }
}

/// Calls MapperRegister until edgecore answers with success, waiting 100 ms doubling to
/// [`Config::register_max_backoff`] (jittered) between attempts; every failure is logged.
/// Returns `None` when `shutdown` fires first.
pub async fn register(
    client: &ManagerClient,
    config: &Config,
    shutdown: &CancellationToken,
) -> Option<MapperRegisterResponse> {
    let request = register_request(config);
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(config.register_max_backoff)
        .with_jitter()
        .without_max_times();
    let attempt = || {
        let mut client = client.clone();
        let request = request.clone();
        async move { client.mapper_register(request).await }
    };
    let dmi_socket = config.dmi_socket.display().to_string();
    let registered = attempt
        .retry(backoff)
        .notify(|status: &tonic::Status, delay: Duration| {
            warn!(
                dmi_socket,
                code = ?status.code(),
                message = status.message(),
                ?delay,
                "MapperRegister failed; retrying"
            );
        });
    tokio::select! {
        () = shutdown.cancelled() => None,
        result = registered => {
            // `without_max_times` retries every error, so only success ends the retries.
            let response = result.ok()?.into_inner();
            info!(
                dmi_socket,
                protocol = config.protocol,
                models = response.model_list.len(),
                devices = response.device_list.len(),
                "registered with edgecore"
            );
            Some(response)
        }
    }
}
