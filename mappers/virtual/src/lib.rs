//! Verge's virtual-device mapper: a KubeEdge DMI v1beta1 mapper for protocol `virtual`
//! whose devices report simulated values.
//!
//! It behaves like a mapper built on KubeEdge's mapper-framework: at start it calls
//! MapperRegister (`withData`) on edgecore's DMI socket, retrying until edgecore answers,
//! loads the models and devices returned, then serves DeviceMapperService on its own socket
//! (the `address` it registered). Every property of every device is read every
//! `collectCycle` and reported with ReportDeviceStatus every `reportCycle`; each device's
//! state (`online`) is reported every `status.reportCycle` (all in ms, 0 meaning 1 s). What a
//! reading is: [`simulation`] and [`device`]. Calls received are logged at `info`, reports
//! and values at `debug` (`RUST_LOG=verge_virtual_mapper=debug`).
//!
//! # Layout
//!
//! * [`config`] — [`Config`] (YAML, camelCase) and its defaults.
//! * [`edgecore`] — the DeviceManagerService client on edgecore's socket, MapperRegister.
//! * [`mapper`] — [`Mapper`]: the devices and models held, one worker task per device.
//! * [`worker`] — a device's loop: poll the schedule, send the reports due.
//! * [`device`] — [`device::VirtualDevice`]: values and schedule of one device (no I/O).
//! * [`simulation`] — bounded random walks per data type.
//! * [`config_data`] — decoding `configData` (`google.protobuf.Any` wrappers).
//! * [`server`] — DeviceMapperService on the mapper's unix socket.

pub mod config;
pub mod config_data;
pub mod device;
pub mod edgecore;
pub mod mapper;
pub mod server;
pub mod simulation;
pub mod worker;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;
use tracing::info;

pub use config::{Config, ConfigError};
pub use mapper::Mapper;

/// Why the mapper stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The mapper's own socket cannot be bound.
    #[error("cannot listen on {path}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("DeviceMapperService server failed")]
    Serve(#[source] tonic::transport::Error),
}

/// Runs the mapper until `shutdown` fires: binds [`Config::socket`] (so a bad path fails
/// at once), registers with edgecore (retrying), loads the devices and models it returned,
/// serves DeviceMapperService, and at shutdown stops every device and removes the socket.
///
/// # Errors
/// [`Error::Bind`], [`Error::Serve`]. edgecore being unreachable is not an error: the
/// mapper keeps retrying.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let listener = server::bind(&config.socket).map_err(|source| Error::Bind {
        path: config.socket.clone(),
        source,
    })?;
    let client = edgecore::client(&config.dmi_socket, config.call_timeout);
    let mapper = Mapper::new(client.clone(), shutdown.child_token());
    let result = match edgecore::register(&client, &config, &shutdown).await {
        None => Ok(()),
        Some(response) => {
            mapper.load(response);
            info!(socket = %config.socket.display(), protocol = config.protocol, "serving DeviceMapperService");
            server::serve(listener, mapper.clone(), shutdown.clone())
                .await
                .map_err(Error::Serve)
        }
    };
    mapper.stop().await;
    let _ = std::fs::remove_file(&config.socket);
    result
}
