//! `cloudhub`: parse flags, load the configuration, initialise telemetry, load (or create)
//! the Verge CA, serve until SIGINT/SIGTERM, then drain for at most `shutdownGrace`
//! (`verge_runtime::serve_with_health`: the probe endpoint on `healthAddr` reports ready once
//! the listeners are up, not ready from the signal on; `/metrics` on the same port).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use verge_cloudhub::streams::Streams;
use verge_cloudhub::trust::{KubeCluster, Trust};
use verge_cloudhub::{CloudHub, Config, LogFormat};
use verge_runtime::health::HealthEndpoint;
use verge_runtime::metrics::{Registry, metrics_route};

/// Verge cloudhub: terminates edge streams and routes messages to controllers.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// YAML configuration file; every field is optional.
    #[arg(long, env = "CLOUDHUB_CONFIG")]
    config: Option<String>,
    /// kubeconfig file; default: `KUBECONFIG`, `~/.kube/config` or the in-cluster config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Overrides `edgeAddr`.
    #[arg(long)]
    edge_addr: Option<SocketAddr>,
    /// Overrides `controllerAddr`.
    #[arg(long)]
    controller_addr: Option<SocketAddr>,
    /// Overrides `joinAddr`.
    #[arg(long)]
    join_addr: Option<SocketAddr>,
    /// Overrides `healthAddr` (the plaintext probe endpoint).
    #[arg(long)]
    health_addr: Option<SocketAddr>,
    /// Overrides `replicaName`.
    #[arg(long)]
    replica_name: Option<String>,
    /// Overrides `logFormat`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Overrides `tracing.otlpEndpoint` (OTLP/gRPC, e.g. `http://127.0.0.1:4317`).
    #[arg(long)]
    otlp_endpoint: Option<String>,
}

impl Args {
    fn load(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        config.edge_addr = self.edge_addr.unwrap_or(config.edge_addr);
        config.controller_addr = self.controller_addr.unwrap_or(config.controller_addr);
        config.join_addr = self.join_addr.unwrap_or(config.join_addr);
        config.health_addr = self.health_addr.unwrap_or(config.health_addr);
        if let Some(name) = &self.replica_name {
            config.replica_name.clone_from(name);
        }
        config.log_format = self.log_format.unwrap_or(config.log_format);
        if self.otlp_endpoint.is_some() {
            config.tracing.otlp_endpoint.clone_from(&self.otlp_endpoint);
        }
        Ok(config)
    }
}

/// The CloudHub with its trust: the CA from the cluster (created when absent).
async fn build(args: &Args, config: Config) -> anyhow::Result<CloudHub> {
    let client = verge_runtime::kube_client(args.kubeconfig.as_deref()).await?;
    let ca = verge_cloudhub::trust::load_or_create(&client, &config.trust)
        .await
        .context("cannot load the Verge CA")?;
    let trust = Trust::new(
        ca,
        Arc::new(KubeCluster::new(client.clone())),
        config.trust.clone(),
    );
    Ok(CloudHub::new(config, Arc::new(trust))?.with_streams(Streams::new(client)))
}

/// jemalloc instead of the C library's malloc. Most of an idle session's memory is buffers
/// of fixed size of which little is written (HTTP/2's 16 KiB write buffer holds a keepalive),
/// so only their first pages are resident. glibc's malloc, after a reconnect storm,
/// carved the new sessions' buffers out of the freed ones at other offsets, touching their
/// pages: 10,000 sessions took 428 MiB after the first connect and 524 to 534 MiB after a
/// reconnect. jemalloc keeps buffers of one size class apart; with its options of
/// `.cargo/config.toml` (one arena, freed pages returned within a second) the storm's peak
/// stayed at the steady 429 MiB, where jemalloc's defaults (eight arenas, ten seconds) reached
/// 468 to 493 MiB (`cargo xtask bench scale`, docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match args.load() {
        Ok(config) => config,
        Err(error) => return verge_runtime::fail("cloudhub", &*error),
    };
    let telemetry = match verge_telemetry::init("cloudhub", config.log_format, &config.tracing) {
        Ok(telemetry) => telemetry,
        Err(error) => return verge_runtime::fail("cloudhub", &error),
    };
    // One socket per edge session: the common soft default of 1,024 files would cap them.
    match verge_runtime::limits::raise_open_files() {
        Ok((before, after)) => tracing::info!(?before, ?after, "open-file limit"),
        Err(error) => tracing::warn!(%error, "open-file limit not raised"),
    }
    let grace = config.shutdown_grace;
    let endpoint = match HealthEndpoint::bind(config.health_addr).await {
        Ok(endpoint) => endpoint,
        Err(error) => return verge_runtime::fail("cloudhub", &error),
    };
    let mut registry = Registry::default();
    verge_cloudhub::metrics::global().register(&mut registry);
    verge_runtime::metrics::kube_api::global().register(&mut registry);
    let endpoint = endpoint.route("/metrics", metrics_route(registry));
    let hub = match build(&args, config).await {
        Ok(hub) => hub,
        Err(error) => return verge_runtime::fail("cloudhub", &*error),
    };
    let outcome =
        verge_runtime::serve_with_health("cloudhub", grace, endpoint, |shutdown, health| {
            hub.with_health(health).run(shutdown)
        })
        .await;
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = %verge_runtime::ErrorChain(&error), "spans lost at exit");
    }
    outcome.exit_code()
}
