//! `cargo xtask down`: stops what `cargo xtask quickstart` started — edgecore,
//! edgecontroller, cloudhub, the edge node's pod containers, then the quickstart's control
//! plane and Jaeger.

use std::process::ExitCode;

/// Arguments of `cargo xtask down` (none).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Stops the quickstart's processes, control plane and Jaeger.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    let dir = crate::quickstart::run_dir();
    let n = crate::local::stop_processes(&dir);
    let containers = crate::local::remove_containers(&dir);
    eprintln!("down: stopped {n} Verge processes, removed {containers} pod containers");
    let was_up = crate::control_plane::down(&crate::quickstart::control_plane_config()).await?;
    eprintln!(
        "down: control plane {}",
        if was_up { "stopped" } else { "was not running" }
    );
    let jaeger = verge_testkit::jaeger::JaegerConfig::from_env();
    let was_up = crate::jaeger::down(&jaeger).await?;
    eprintln!(
        "down: Jaeger {}",
        if was_up { "stopped" } else { "was not running" }
    );
    Ok(ExitCode::SUCCESS)
}
