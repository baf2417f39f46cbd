//! `edgecore`: the Verge edge node agent. Parses flags, loads the configuration, installs
//! telemetry, runs [`verge_edgecore::EdgeCore`] until SIGINT/SIGTERM and then drains it
//! within a grace period.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use tokio_util::sync::CancellationToken;
use verge_edgecore::config::LogFormat;
use verge_edgecore::{Config, EdgeCore};

/// How long the modules get to stop after a shutdown signal.
const GRACE_PERIOD: Duration = Duration::from_secs(10);

/// The Verge edge node agent.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// YAML configuration file; without it, the defaults apply.
    #[arg(long, env = "EDGECORE_CONFIG")]
    config: Option<PathBuf>,
    /// Node name (overrides `node_name`).
    #[arg(long)]
    node_name: Option<String>,
    /// cloudhub EdgeHub address, e.g. `http://127.0.0.1:10000` (overrides `cloudhub`;
    /// `cloudhub_alternates` stay).
    #[arg(long)]
    cloudhub: Option<String>,
    /// Bootstrap token (overrides `token`).
    #[arg(long, env = "EDGECORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Data directory (overrides `data_dir`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The node's InternalIP (overrides `node_ip`).
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// Log format (overrides `log_format`).
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
            config.cloudhub.clone_from(v);
        }
        if let Some(v) = &self.token {
            config.token.clone_from(v);
        }
        if let Some(v) = &self.data_dir {
            config.data_dir.clone_from(v);
        }
        if self.node_ip.is_some() {
            config.node_ip = self.node_ip;
        }
        if let Some(v) = self.log_format {
            config.log_format = v;
        }
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "edgecore failed");
            eprintln!("edgecore: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the configuration, runs edgecore until a signal and drains it.
async fn run() -> anyhow::Result<()> {
    let config = Args::parse().config()?;
    verge_telemetry::init("edgecore", config.log_format);
    let edgecore = EdgeCore::new(config).context("starting edgecore")?;

    let shutdown = CancellationToken::new();
    let mut run = tokio::spawn(edgecore.run(shutdown.clone()));
    tokio::select! {
        result = &mut run => return result.context("edgecore task")?.map_err(Into::into),
        signal = shutdown_signal() => tracing::info!(signal, "shutting down"),
    }
    shutdown.cancel();
    match tokio::time::timeout(GRACE_PERIOD, run).await {
        Ok(result) => result.context("edgecore task")?.map_err(Into::into),
        Err(_) => anyhow::bail!("edgecore did not stop within {GRACE_PERIOD:?}"),
    }
}

/// Resolves on SIGINT or SIGTERM, naming the signal.
async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops edgecore");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
