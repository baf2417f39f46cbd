//! The binary shell every controller's `main.rs` shares: its flags ([`Flags`]), then
//! [`main`]: load the configuration, initialise telemetry, build the Kubernetes client, run
//! until SIGINT/SIGTERM and drain within the grace period (`verge_runtime::serve`).

use std::error::Error as StdError;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;
use verge_telemetry::LogFormat;

use crate::Config;

/// The command-line flags of a controller (flatten them into its `clap::Parser`).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// YAML configuration file (every field optional).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A cloudhub replica's ControllerHub address; repeat it for several replicas. Replaces
    /// `cloudhub` of the file.
    #[arg(long)]
    pub cloudhub: Vec<String>,
    /// `<namespace>/<service>` whose EndpointSlices list every cloudhub replica; overrides
    /// `cloudhubService`.
    #[arg(long)]
    pub cloudhub_service: Option<String>,
    /// kubeconfig file; default: `KUBECONFIG`, `~/.kube/config` or the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Runs controller `service` with `flags`: the configuration file (or the defaults) with
/// the flags' overrides, telemetry, the Kubernetes client, then `run(config, client,
/// shutdown)` until a signal, drained within `shutdown_grace`. Returns the process's exit
/// code; a configuration or client error is printed and fails the process.
pub async fn main<F, E>(
    service: &'static str,
    flags: Flags,
    run: impl FnOnce(Config, kube::Client, CancellationToken) -> F,
) -> ExitCode
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: StdError + Send + Sync + 'static,
{
    let mut config = match &flags.config {
        Some(path) => match Config::load(path) {
            Ok(config) => config,
            Err(error) => return verge_runtime::fail(service, &error),
        },
        None => Config::default(),
    };
    if !flags.cloudhub.is_empty() {
        config.cloudhub = flags.cloudhub;
    }
    if let Some(service) = flags.cloudhub_service {
        config.cloudhub_service = Some(service);
    }
    verge_telemetry::init(service, flags.log_format);
    let client = match verge_runtime::kube_client(flags.kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(error) => return verge_runtime::fail(service, &*error),
    };
    let grace = config.shutdown_grace;
    verge_runtime::serve(service, grace, |shutdown| run(config, client, shutdown))
        .await
        .exit_code()
}
