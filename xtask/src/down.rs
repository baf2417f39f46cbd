//! `cargo xtask down`: stops what `cargo xtask quickstart` (with or without `--deployed`)
//! or `cargo xtask conformance` started — edgecore, edgecontroller, cloudhub, the edge node's
//! pod containers, the namespaced edge nodes of `conformance --nodes N` (their edgecores,
//! engines, namespaces, site, and the host's routes and rules for them), the kubelet
//! node of `--deployed` (its pods, processes and host state), then the quickstart's control
//! plane and Jaeger.

use std::process::ExitCode;

/// Arguments of `cargo xtask down` (none).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Stops the quickstart's processes, kubelet node, control plane and Jaeger.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    let dir = crate::quickstart::run_dir();
    let n = crate::local::stop_processes(&dir);
    let containers = crate::local::remove_containers(&dir);
    eprintln!("down: stopped {n} Verge processes, removed {containers} pod containers");
    let dir_clone = dir.clone();
    let extra =
        tokio::task::spawn_blocking(move || crate::local::extra_edges::clean(&dir_clone)).await?;
    if extra > 0 {
        eprintln!(
            "down: stopped {extra} namespaced edge nodes (edgecore, engine, namespace) and their site"
        );
    }
    let node = crate::quickstart::node_config();
    if node.run_dir.exists() {
        let was_up = node.down().await?;
        eprintln!(
            "down: kubelet node {}",
            if was_up { "stopped" } else { "was not running" }
        );
    }
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
