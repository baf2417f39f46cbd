//! The `virtual-mapper` binary: parse flags, load the configuration, initialise telemetry,
//! run the mapper until SIGINT/SIGTERM (`verge_runtime::serve`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use verge_telemetry::LogFormat;
use verge_virtual_mapper::Config;

/// Verge's virtual-device mapper: a KubeEdge DMI v1beta1 mapper whose devices report
/// simulated values.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// YAML configuration file (every field optional).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Protocol served (`MapperInfo.protocol`); overrides `protocol` of the file.
    #[arg(long)]
    protocol: Option<String>,
    /// Mapper name (`MapperInfo.name`); overrides `name`.
    #[arg(long)]
    name: Option<String>,
    /// Socket of the mapper's DeviceMapperService; overrides `socket`.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// edgecore's DMI socket; overrides `dmiSocket`.
    #[arg(long)]
    dmi_socket: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(config) => config,
            Err(error) => return verge_runtime::fail("virtual-mapper", &error),
        },
        None => Config::default(),
    };
    if let Some(protocol) = args.protocol {
        config.protocol = protocol;
    }
    if let Some(name) = args.name {
        config.name = name;
    }
    if let Some(socket) = args.socket {
        config.socket = socket;
    }
    if let Some(dmi_socket) = args.dmi_socket {
        config.dmi_socket = dmi_socket;
    }
    if let Err(error) = config.validate() {
        return verge_runtime::fail("virtual-mapper", &error);
    }
    // The mapper exports no traces (DMI calls carry no trace context yet): logs only.
    let tracing_off = verge_telemetry::TracingConfig::default();
    let _telemetry = match verge_telemetry::init("virtual-mapper", args.log_format, &tracing_off) {
        Ok(guard) => guard,
        Err(error) => return verge_runtime::fail("virtual-mapper", &error),
    };
    let grace = config.shutdown_grace;
    verge_runtime::serve("virtual-mapper", grace, |shutdown| {
        verge_virtual_mapper::run(config, shutdown)
    })
    .await
    .exit_code()
}
