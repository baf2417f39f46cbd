//! `cloudhub`: parse flags, load the configuration, initialise telemetry, serve until
//! SIGINT/SIGTERM, then drain for at most `shutdown_grace`.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use tokio_util::sync::CancellationToken;
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

async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for SIGINT")?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Args::parse().load()?;
    verge_telemetry::init("cloudhub", config.log_format);
    let grace = config.shutdown_grace;
    let hub = CloudHub::new(config)?;
    let shutdown = CancellationToken::new();
    let mut server = tokio::spawn(hub.run(shutdown.clone()));
    tokio::select! {
        result = &mut server => return result.context("cloudhub task panicked")?.map_err(Into::into),
        signal = shutdown_signal() => signal?,
    }
    tracing::info!(grace = ?grace, "shutting down");
    shutdown.cancel();
    match tokio::time::timeout(grace, server).await {
        Ok(result) => result.context("cloudhub task panicked")??,
        Err(_) => tracing::warn!("grace period elapsed; exiting with streams still open"),
    }
    Ok(())
}
