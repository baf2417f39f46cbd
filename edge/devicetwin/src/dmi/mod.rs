//! DMI v1beta1, KubeEdge's device-management interface, on edgecore's side: the
//! `DeviceManagerService` server mappers call ([`server`]) on a unix socket ([`socket`]),
//! the client of each mapper's `DeviceMapperService` ([`client`]), and the conversion of
//! Devices and models into DMI messages ([`convert`], [`push`]).

pub mod client;
pub mod convert;
pub mod push;
pub mod server;
pub mod socket;

use std::path::Path;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::error::Error;
use server::DmiServer;

/// Serves `server` on the unix socket at `path` (mode `mode`) until `shutdown`, then
/// removes the socket file. Connections are relayed by `verge_runtime::unix_grpc`, so Go
/// mappers that send the socket path as `:authority` are served.
///
/// # Errors
/// [`Error::Socket`] when the socket cannot be bound; [`Error::Serve`] when the server
/// fails.
pub async fn serve(
    path: &Path,
    mode: u32,
    server: DmiServer,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let listener = socket::bind(path, mode).await?;
    info!(socket = %path.display(), "DMI server listening");
    let served = tonic::transport::Server::builder()
        .add_service(server::service(server))
        .serve_with_incoming_shutdown(
            verge_runtime::unix_grpc::incoming(listener),
            shutdown.cancelled(),
        )
        .await
        .map_err(Error::Serve);
    socket::remove(path);
    served
}
