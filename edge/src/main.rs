//! `edgecore`: the Verge edge node agent. Parses flags, loads the configuration, installs
//! telemetry, runs [`verge_edgecore::EdgeCore`] until SIGINT/SIGTERM and then drains it
//! within `shutdownGrace` (`verge_runtime::serve`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use verge_edgecore::config::LogFormat;
use verge_edgecore::{Config, EdgeCore};

/// The Verge edge node agent.
#[derive(Debug, Parser)]
#[command(version, about)]
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
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Args::parse().config() {
        Ok(config) => config,
        Err(error) => return verge_runtime::fail("edgecore", &*error),
    };
    verge_telemetry::init("edgecore", config.log_format);
    let grace = config.shutdown_grace;
    let edgecore = match EdgeCore::new(config) {
        Ok(edgecore) => edgecore,
        Err(error) => return verge_runtime::fail("edgecore", &error),
    };
    verge_runtime::serve("edgecore", grace, |shutdown| edgecore.run(shutdown))
        .await
        .exit_code()
}
