//! `cargo xtask quickstart`: the main job on one machine — a local Kubernetes control
//! plane, cloudhub, edgecontroller and one edgecore, all as background processes, and a
//! sample Deployment running on the edge node.
//!
//! Steps (each prints progress): Debian packages, Docker and the test image; the control
//! plane (built once into the cache, then started; its state in
//! `~/.cache/verge/run/quickstart/control-plane`); `cargo build --bins`; the three Verge
//! processes (configs, logs and pids in `~/.cache/verge/run/quickstart/`); then it waits
//! until the edge node is Ready, applies `deploy/examples/edge-deployment.yaml` pinned to
//! the node, waits until its pods are Running, prints `kubectl get pods -o wide` and the
//! `export KUBECONFIG=...` line, and exits 0. `cargo xtask down` stops everything.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use verge_testkit::ControlPlaneConfig;

use crate::local;

/// Arguments of `cargo xtask quickstart`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of the edge node to start.
    #[arg(long, default_value = "verge-edge-1")]
    pub node_name: String,
    /// How long to wait for the edge node, then for the sample pods, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
}

/// The quickstart's run directory: `~/.cache/verge/run/quickstart`.
pub fn run_dir() -> PathBuf {
    verge_testkit::paths::run_dir().join("quickstart")
}

/// The control-plane configuration of the quickstart (its own state directory, so
/// `cargo xtask test` never stops it).
pub fn control_plane_config() -> ControlPlaneConfig {
    ControlPlaneConfig {
        state_dir: run_dir().join("control-plane"),
        ..ControlPlaneConfig::from_env()
    }
}

/// Runs the quickstart.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let timeout = Duration::from_secs(args.timeout_secs);
    eprintln!("quickstart: [1/6] Debian packages, Docker engine and the local test image");
    local::ensure_host().await?;

    eprintln!("quickstart: [2/6] Kubernetes control plane (the first build takes ~10 minutes)");
    let cp = crate::control_plane::up(&control_plane_config()).await?;

    eprintln!("quickstart: [3/6] cargo build --bins");
    let bin_dir = local::build_bins(false)?;

    eprintln!("quickstart: [4/6] starting cloudhub, edgecontroller, devicecontroller and edgecore");
    let verge = local::start(&run_dir(), &bin_dir, &cp, &args.node_name).await?;

    eprintln!(
        "quickstart: [5/6] waiting for node {} to be Ready",
        args.node_name
    );
    verge.wait_ready(&cp, timeout).await?;
    let _ = cp
        .kubectl_command()
        .args(["get", "nodes", "-o", "wide"])
        .status();

    eprintln!("quickstart: [6/6] applying a sample Deployment to the edge node");
    let manifest = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/edge-deployment.yaml"),
    )?
    .replace("verge-edge-1", &args.node_name);
    let manifest_path = run_dir().join("edge-deployment.yaml");
    std::fs::write(&manifest_path, manifest)?;
    let status = cp
        .kubectl_command()
        .arg("apply")
        .arg("-f")
        .arg(&manifest_path)
        .status()?;
    if !status.success() {
        bail!("kubectl apply failed: {status}");
    }
    let status = cp
        .kubectl_command()
        .args(["rollout", "status", "deployment/hello-edge", "--timeout"])
        .arg(format!("{}s", args.timeout_secs))
        .status()?;
    if !status.success() {
        bail!(
            "the sample Deployment did not become available; logs in {}",
            run_dir().join("logs").display()
        );
    }
    let _ = cp
        .kubectl_command()
        .args(["get", "pods", "-o", "wide"])
        .status();
    eprintln!(
        "quickstart: ready after {:.1?}; `cargo xtask down` stops it all",
        started.elapsed()
    );
    println!("export KUBECONFIG={}", cp.kubeconfig().display());
    Ok(ExitCode::SUCCESS)
}
