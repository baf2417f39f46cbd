//! `cargo xtask control-plane up|down|env|status`: the local Kubernetes control plane
//! of `verge-testkit` (state in `$VERGE_STATE_DIR`, default
//! `~/.cache/verge/run/control-plane`).

use std::process::ExitCode;
use std::time::Instant;

use clap::Subcommand;
use verge_testkit::{ControlPlane, ControlPlaneConfig};

/// Arguments of `cargo xtask control-plane`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Build (once) and start the control plane, or reuse the running one; prints the
    /// `export KUBECONFIG=...` line.
    Up,
    /// Stop the control plane and remove its state.
    Down,
    /// Print the env file (`eval "$(cargo xtask control-plane env)"`).
    Env,
    /// Report whether a healthy control plane runs (exit code 1 when not).
    Status,
}

/// Runs one control-plane action.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = ControlPlaneConfig::from_env();
    match args.action {
        Action::Up => {
            up(&config).await?;
        }
        Action::Down => {
            if down(&config).await? {
                eprintln!(
                    "control plane stopped; state {} removed",
                    config.state_dir.display()
                );
            } else {
                eprintln!(
                    "no control plane was running in {}",
                    config.state_dir.display()
                );
            }
        }
        Action::Env => match config.status().await? {
            Some(cp) => print!("{}", std::fs::read_to_string(cp.env_file())?),
            None => {
                eprintln!("no control plane running; run `cargo xtask control-plane up`");
                return Ok(ExitCode::FAILURE);
            }
        },
        Action::Status => match config.status().await? {
            Some(cp) => {
                println!(
                    "running: Kubernetes v{} at {}",
                    cp.version(),
                    cp.server_url()
                );
                println!("kubeconfig: {}", cp.kubeconfig().display());
                for (name, pid) in cp.pids() {
                    println!(
                        "  {name:<24} pid {pid:<8} log {}",
                        cp.log_path(name).display()
                    );
                }
            }
            None => {
                println!("not running (state dir {})", config.state_dir.display());
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds if needed and starts (or reuses) the control plane, reporting progress and
/// the time to ready on stderr and the `export KUBECONFIG=...` line on stdout.
pub async fn up(config: &ControlPlaneConfig) -> anyhow::Result<ControlPlane> {
    let build_config = config.clone();
    tokio::task::spawn_blocking(move || build_config.ensure_built()).await??;
    eprintln!(
        "starting Kubernetes v{} control plane (state {})",
        config.version,
        config.state_dir.display()
    );
    let started = Instant::now();
    let cp = config.up().await?;
    eprintln!(
        "control plane ready at {} after {:.1?}",
        cp.server_url(),
        started.elapsed()
    );
    println!("export KUBECONFIG={}", cp.kubeconfig().display());
    Ok(cp)
}

/// Stops the control plane; true when one was running.
pub async fn down(config: &ControlPlaneConfig) -> anyhow::Result<bool> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || config.down()).await?
}
