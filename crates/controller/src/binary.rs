//! The binary shell every controller's `main.rs` shares: its flags ([`Flags`]), then
//! [`main`]: load the configuration, initialise telemetry, bind the probe endpoint, build the
//! Kubernetes client, run until SIGINT/SIGTERM and drain within the grace period
//! (`verge_runtime::serve_with_health`).

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;
use verge_runtime::health::{Health, HealthEndpoint};
use verge_telemetry::LogFormat;

use crate::Config;
use crate::leader::Leadership;

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
    /// Address of the probe endpoint; overrides `healthAddr`.
    #[arg(long)]
    pub health_addr: Option<SocketAddr>,
    /// kubeconfig file; default: `KUBECONFIG`, `~/.kube/config` or the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// OTLP/gRPC endpoint spans are exported to, e.g. `http://127.0.0.1:4317`; overrides
    /// `tracing.otlpEndpoint`.
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
}

/// The gRPC health service (on the probe port) that is SERVING while this replica leads
/// and NOT_SERVING while it stands by ([`report_leadership`]). Readiness (`""`) is SERVING
/// for both: a standby is healthy.
pub const LEADER_SERVICE: &str = "leader";

/// Runs controller `service` with `flags`: the configuration file (or the defaults) with
/// the flags' overrides, telemetry, the probe endpoint on `healthAddr` (else
/// `default_health`), the Kubernetes client, then `run(config, client, shutdown, health)`
/// until a signal, drained within `shutdown_grace` (`verge_runtime::serve_with_health`:
/// ready while `run` runs, leader or standby, not ready from the signal on). Returns the
/// process's exit code; a configuration, endpoint or client error is printed and fails the
/// process.
pub async fn main<F, E>(
    service: &'static str,
    default_health: SocketAddr,
    flags: Flags,
    run: impl FnOnce(Config, kube::Client, CancellationToken, &Health) -> F,
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
    if let Some(addr) = flags.health_addr {
        config.health_addr = Some(addr);
    }
    if flags.otlp_endpoint.is_some() {
        config.tracing.otlp_endpoint = flags.otlp_endpoint;
    }
    let telemetry = match verge_telemetry::init(service, flags.log_format, &config.tracing) {
        Ok(telemetry) => telemetry,
        Err(error) => return verge_runtime::fail(service, &error),
    };
    let health_addr = config.health_addr.unwrap_or(default_health);
    let endpoint = match HealthEndpoint::bind(health_addr).await {
        Ok(endpoint) => endpoint,
        Err(error) => return verge_runtime::fail(service, &error),
    };
    let mut registry = verge_runtime::metrics::Registry::default();
    crate::metrics::register(&mut registry);
    let endpoint = endpoint.route("/metrics", verge_runtime::metrics::metrics_route(registry));
    let client = match verge_runtime::kube_client(flags.kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(error) => return verge_runtime::fail(service, &*error),
    };
    let grace = config.shutdown_grace;
    let outcome = verge_runtime::serve_with_health(service, grace, endpoint, |shutdown, health| {
        let running = run(config, client, shutdown, &health);
        async move {
            health.set_ready(true).await;
            running.await
        }
    })
    .await;
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = %verge_runtime::ErrorChain(&error), "spans lost at exit");
    }
    outcome.exit_code()
}

/// Mirrors `leadership` into the [`LEADER_SERVICE`] status of `health` until the elector
/// drops its side (a task on the current runtime).
pub fn report_leadership(health: &Health, leadership: &Leadership) {
    let health = health.clone();
    let mut changes = leadership.subscribe();
    verge_runtime::tasks::spawn("leadership status", async move {
        loop {
            let leading = changes.borrow_and_update().leading;
            health.set_service(LEADER_SERVICE, leading).await;
            if changes.changed().await.is_err() {
                break;
            }
        }
    });
}
