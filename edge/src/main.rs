//! `edgecore`: the Verge edge node agent. Parses flags, loads the configuration, installs
//! telemetry, makes sure the node has a certificate (joining with `edgeHub.token` if not),
//! runs [`verge_edgecore::EdgeCore`] until SIGINT/SIGTERM and then drains it within
//! `shutdownGrace` (`verge_runtime::serve`); with `metricsAddr` (default `127.0.0.1:10008`)
//! it serves `/metrics`, `/healthz` and `/readyz` there (`verge_runtime::serve_with_health`).
//!
//! `edgecore join --cloudhub <host>:10002 --token <id.secret> [--ca-cert-hash sha256:…]`
//! only joins: it stores the node's key and certificate under `<dataDir>/pki` and exits.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use verge_edgecore::certificates::{self, Credentials, JoinParams};
use verge_edgecore::config::LogFormat;
use verge_edgecore::{Config, EdgeCore};
use verge_runtime::health::HealthEndpoint;
use verge_runtime::metrics::{Registry, metrics_route};

/// The Verge edge node agent.
#[derive(Debug, Parser)]
#[command(name = "edgecore", version, about)]
struct Args {
    /// YAML configuration file; without it, the defaults apply.
    #[arg(long, env = "EDGECORE_CONFIG")]
    config: Option<PathBuf>,
    /// Node name (overrides `nodeName`).
    #[arg(long)]
    node_name: Option<String>,
    /// cloudhub EdgeHub address, e.g. `http://127.0.0.1:10000` (overrides `edgeHub.server`;
    /// `edgeHub.serverAlternates` stay).
    #[arg(long)]
    cloudhub: Option<String>,
    /// Bootstrap token (overrides `edgeHub.token`).
    #[arg(long, env = "EDGECORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Data directory (overrides `dataDir`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The node's InternalIP (overrides `edged.nodeIP`).
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// Log format (overrides `logFormat`).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// OTLP/gRPC endpoint spans are exported to, e.g. `http://127.0.0.1:4317` (overrides
    /// `tracing.otlpEndpoint`).
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// What to do; without a command, run the agent.
    #[command(subcommand)]
    command: Option<Command>,
}

/// edgecore's commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Join the cluster with a Kubernetes bootstrap token: make the node's private key,
    /// send a CSR to cloudhub's Join service and store the signed certificate under
    /// `<dataDir>/pki`. `kubectl get csr` shows the request, approved and issued.
    Join(JoinArgs),
    /// Print the MQTT broker's ACL file (mosquitto `acl_file`) made from `eventBus`:
    /// edgecore's user may use every device, node and app topic, each of `eventBus.clients`
    /// only its devices' and groups' topics, nobody else anything. Install it as the broker's
    /// `acl_file` (docs/devices.md).
    MqttAcl,
}

/// Arguments of `edgecore join` (the node name, data directory and config come from the
/// global flags).
#[derive(Debug, clap::Args)]
struct JoinArgs {
    /// cloudhub's Join service, `<host>:<port>` or `https://<host>:<port>` (port 10002 by
    /// default).
    #[arg(long = "cloudhub", value_name = "ADDR")]
    address: String,
    /// The bootstrap token, `<token-id>.<token-secret>` (a `bootstrap.kubernetes.io/token`
    /// Secret in `kube-system`, e.g. from `kubeadm token create`).
    #[arg(long, env = "EDGECORE_JOIN_TOKEN", hide_env_values = true)]
    token: String,
    /// Pin of the Verge CA, `sha256:<hex>` (kubeadm's `--discovery-token-ca-cert-hash`;
    /// docs/install.md). Without it the CA is authenticated by the token, which cloudhub
    /// offers only with `trust.tokenCaDiscovery`.
    #[arg(long)]
    ca_cert_hash: Option<String>,
    /// Verify cloudhub's certificate against this name instead of the address's host.
    #[arg(long)]
    tls_server_name: Option<String>,
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(v) = &self.node_name {
            config.node_name.clone_from(v);
        }
        if let Some(v) = &self.cloudhub {
            config.edge_hub.server.clone_from(v);
        }
        if let Some(v) = &self.token {
            config.edge_hub.token.clone_from(v);
        }
        if let Some(v) = &self.data_dir {
            config.data_dir.clone_from(v);
        }
        if self.node_ip.is_some() {
            config.edged.node_ip = self.node_ip;
        }
        if let Some(v) = self.log_format {
            config.log_format = v;
        }
        if self.otlp_endpoint.is_some() {
            config.tracing.otlp_endpoint.clone_from(&self.otlp_endpoint);
        }
        Ok(config)
    }
}

/// `edgecore join`: joins and prints what happened.
async fn join(config: &Config, args: JoinArgs) -> ExitCode {
    let address = if args.address.contains("://") {
        args.address
    } else {
        format!("https://{}", args.address)
    };
    let params = JoinParams {
        address,
        token: args.token,
        ca_cert_hash: args.ca_cert_hash,
        node_name: config.node_name.clone(),
        tls_server_name: args.tls_server_name,
        register_with_taints: config.register_with_taints(),
    };
    let credentials = Credentials::of(&config.hub_settings());
    match certificates::join(&params, &credentials).await {
        Ok(joined) => {
            println!(
                "node {} joined: certificate in {} (CertificateSigningRequest {}); start edgecore",
                joined.node,
                credentials.dir().display(),
                joined.csr_name
            );
            ExitCode::SUCCESS
        }
        Err(error) => verge_runtime::fail("edgecore join", &error),
    }
}

/// At most this many threads in tokio's blocking pool (its default is 512). edgecore runs
/// redb transactions, volume and termination-message file work there, all short: with no
/// limit, 100 pods started at once grew the pool to 54 threads, each with its stack and, in
/// glibc, a malloc arena of its own that stays after the thread ends (`cargo xtask bench
/// pod-startup`, edgecore's resident memory). Work beyond the limit waits for a thread.
const MAX_BLOCKING_THREADS: usize = 4;

/// jemalloc instead of the C library's malloc, configured at build time by
/// `JEMALLOC_SYS_WITH_MALLOC_CONF` in `.cargo/config.toml` (one arena, per-thread caches of
/// small sizes only, freed pages returned to the system within a second by a background
/// thread). Starting many pods at once
/// briefly holds many Docker requests and pod copies; glibc's malloc kept the pages of that
/// peak resident after it, jemalloc gives them back (`cargo xtask bench pod-startup`,
/// edgecore's resident memory).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => verge_runtime::fail("edgecore", &error),
    }
}

async fn run() -> ExitCode {
    let mut args = Args::parse();
    let command = args.command.take();
    let config = match args.config() {
        Ok(config) => config,
        Err(error) => return verge_runtime::fail("edgecore", &*error),
    };
    // Before telemetry: the ACL alone goes to stdout.
    if matches!(command, Some(Command::MqttAcl)) {
        return match verge_edgecore::eventbus::acl::mosquitto_acl(
            &config.event_bus,
            &config.node_name,
        ) {
            Ok(acl) => {
                print!("{acl}");
                ExitCode::SUCCESS
            }
            Err(reason) => {
                eprintln!("edgecore: error: {reason}");
                ExitCode::from(2)
            }
        };
    }
    let telemetry = match verge_telemetry::init("edgecore", config.log_format, &config.tracing) {
        Ok(telemetry) => telemetry,
        Err(error) => return verge_runtime::fail("edgecore", &error),
    };
    if let Some(Command::Join(join_args)) = command {
        return join(&config, join_args).await;
    }

    if let Err(error) =
        certificates::ensure(&config.hub_settings(), config.register_with_taints()).await
    {
        return verge_runtime::fail("edgecore", &error);
    }
    let grace = config.shutdown_grace;
    let metrics_addr = config.metrics_addr;
    let edgecore = match EdgeCore::new(config) {
        Ok(edgecore) => edgecore,
        Err(error) => return verge_runtime::fail("edgecore", &error),
    };
    let edgecore = match &args.config {
        Some(path) => edgecore.with_config_file(path.clone()),
        None => edgecore,
    };
    let edgecore = match std::env::current_exe() {
        Ok(path) => edgecore.with_binary(path),
        Err(error) => {
            tracing::warn!(%error, "the path of edgecore's binary is unknown: upgrades will fail");
            edgecore
        }
    };
    let restart = edgecore.restart();
    let outcome = match metrics_addr {
        None => verge_runtime::serve("edgecore", grace, |shutdown| edgecore.run(shutdown)).await,
        Some(addr) => {
            let endpoint = match HealthEndpoint::bind(addr).await {
                Ok(endpoint) => endpoint,
                Err(error) => return verge_runtime::fail("edgecore", &error),
            };
            let mut registry = Registry::default();
            verge_edgecore::metrics::register(&mut registry, edgecore.store());
            let endpoint = endpoint.route("/metrics", metrics_route(registry));
            verge_runtime::serve_with_health(
                "edgecore",
                grace,
                endpoint,
                |shutdown, health| async move {
                    health.set_ready(true).await;
                    edgecore.run(shutdown).await
                },
            )
            .await
        }
    };
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = %verge_runtime::ErrorChain(&error), "spans lost at exit");
    }
    if restart.requested() {
        return restart_in_place(restart.program());
    }
    outcome.exit_code()
}

/// Replaces this process with edgecore again (the same arguments and environment; the same
/// binary, or `program`: an upgrade's trial binary or its roll-back): a task changed what it
/// runs with. The modules stopped first; the containers run on.
fn restart_in_place(program: Option<PathBuf>) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let program = match program.map_or_else(std::env::current_exe, Ok) {
        Ok(program) => program,
        Err(error) => return verge_runtime::fail("edgecore restart", &error),
    };
    eprintln!("edgecore: restarting in place ({})", program.display());
    let error = std::process::Command::new(&program)
        .args(std::env::args_os().skip(1))
        .exec();
    verge_runtime::fail("edgecore restart", &error)
}
