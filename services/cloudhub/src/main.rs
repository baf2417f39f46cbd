//! `cloudhub`: parse flags, load the configuration, initialise telemetry, serve until
//! SIGINT/SIGTERM, then drain for at most `shutdown_grace` (`verge_runtime::serve`).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use verge_cloudhub::{CloudHub, Config, LogFormat};

/// Verge cloudhub: terminates edge streams and routes messages to controllers.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// YAML configuration file; every field is optional.
    #[arg(long, env = "CLOUDHUB_CONFIG")]
    config: Option<String>,
    /// Overrides `edge_addr`.
    #[arg(long)]
    edge_addr: Option<SocketAddr>,
    /// Overrides `controller_addr`.
    #[arg(long)]
    controller_addr: Option<SocketAddr>,
    /// Overrides `token` (the shared edge bootstrap token).
    #[arg(long, env = "CLOUDHUB_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Overrides `replica_name`.
    #[arg(long)]
    replica_name: Option<String>,
    /// Overrides `log_format`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

impl Args {
    fn load(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        config.edge_addr = self.edge_addr.unwrap_or(config.edge_addr);
        config.controller_addr = self.controller_addr.unwrap_or(config.controller_addr);
        config.token = self.token.unwrap_or(config.token);
        config.replica_name = self.replica_name.unwrap_or(config.replica_name);
        config.log_format = self.log_format.unwrap_or(config.log_format);
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Args::parse().load() {
        Ok(config) => config,
        Err(error) => return verge_runtime::fail("cloudhub", &*error),
    };
    verge_telemetry::init("cloudhub", config.log_format);
    let grace = config.shutdown_grace;
    let hub = match CloudHub::new(config) {
        Ok(hub) => hub,
        Err(error) => return verge_runtime::fail("cloudhub", &error),
    };
    verge_runtime::serve("cloudhub", grace, |shutdown| hub.run(shutdown))
        .await
        .exit_code()
}
