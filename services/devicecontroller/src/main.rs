//! The `devicecontroller` binary: parse flags, load the configuration, initialise telemetry,
//! build the Kubernetes client, run until SIGINT/SIGTERM, drain within the grace period
//! (`verge_runtime::serve`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use verge_devicecontroller::{Config, DeviceController};
use verge_telemetry::LogFormat;

/// Verge devicecontroller: sends Devices and DeviceModels to their edge nodes and writes
/// what the edges report into DeviceStatus objects.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// YAML configuration file (every field optional).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A cloudhub replica's ControllerHub address; repeat it for several replicas. Replaces
    /// `cloudhub` of the file.
    #[arg(long)]
    cloudhub: Vec<String>,
    /// `<host>:<port>` resolving to every cloudhub replica; overrides `cloudhubDns`.
    #[arg(long)]
    cloudhub_dns: Option<String>,
    /// kubeconfig file; default: `KUBECONFIG`, `~/.kube/config` or the in-cluster config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
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
            Err(error) => return verge_runtime::fail("devicecontroller", &error),
        },
        None => Config::default(),
    };
    if !args.cloudhub.is_empty() {
        config.cloudhub = args.cloudhub;
    }
    if let Some(dns) = args.cloudhub_dns {
        config.cloudhub_dns = Some(dns);
    }
    verge_telemetry::init("devicecontroller", args.log_format);
    let client = match verge_runtime::kube_client(args.kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(error) => return verge_runtime::fail("devicecontroller", &*error),
    };
    let grace = config.shutdown_grace;
    let controller = DeviceController::new(config, client);
    verge_runtime::serve("devicecontroller", grace, |shutdown| {
        controller.run(shutdown)
    })
    .await
    .exit_code()
}
