//! `cargo xtask quickstart --deployed`: the cloud side as pods on the test kit's kubelet node,
//! set up exactly as docs/install.md tells an operator — the images built (`cargo xtask
//! images`) and moved into the node's containerd, `kubectl apply -k deploy/cloud`, every
//! Deployment Available — and an edgecore installed from `deploy/edge`, joined through the
//! `cloudhub` Service with a bootstrap token and started with the systemd unit's command line
//! (as a detached process; its files in `~/.cache/verge/run/quickstart/deployed-edge`). Then
//! the sample Deployment runs on the edge, as in the default quickstart. The simulated
//! thermometer is left out here. `cargo xtask down` stops the edge, the kubelet node (its pods
//! with it) and the control plane.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use verge_testkit::daemon;
use verge_testkit::deployment::{Deployment, SERVICES, TAG};
use verge_testkit::edge_install::EdgeInstall;
use verge_testkit::trust::{TokenKind, create_bootstrap_token};
use verge_testkit::wait::wait_node_ready;

use super::{Args, control_plane_config, node_config, run_dir, sample_deployment};
use crate::{images, local};

/// How long the cloud side's Deployments may take to become Available.
const AVAILABLE: Duration = Duration::from_secs(180);

/// The installed edge's directory: `~/.cache/verge/run/quickstart/deployed-edge`.
fn edge_dir() -> PathBuf {
    run_dir().join("deployed-edge")
}

/// Runs the deployed quickstart (see the module docs).
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let timeout = Duration::from_secs(args.timeout_secs);
    std::fs::create_dir_all(run_dir().join("logs"))?;
    local::stop_processes(&run_dir());
    local::remove_containers(&run_dir());

    eprintln!("quickstart: [1/8] Debian packages, Docker engine and the local test image");
    local::ensure_host().await?;

    eprintln!("quickstart: [2/8] Kubernetes control plane (the first build takes ~10 minutes)");
    let cp = crate::control_plane::up(&control_plane_config()).await?;

    eprintln!(
        "quickstart: [3/8] images verge/<service>:{TAG}, profile {} (a cold release build \
         takes ~15 minutes; --profile images-test a few)",
        args.profile
    );
    let edgecore = build_images(&args.profile).await?;

    eprintln!(
        "quickstart: [4/8] kubelet node (kubelet, kube-proxy, containerd; the first build \
         takes several minutes) and the images moved into its containerd"
    );
    let env = Deployment::start(cp.clone(), &node_config()).await?;

    eprintln!("quickstart: [5/8] kubectl apply -k deploy/cloud; waiting for every Deployment");
    let applied = Instant::now();
    env.apply()?;
    env.wait_available(AVAILABLE).await?;
    eprintln!(
        "quickstart: {} Available {:.1?} after kubectl apply",
        SERVICES.join(", "),
        applied.elapsed()
    );
    let _ = cp
        .kubectl_command()
        .args(["-n", "verge-system", "get", "pods", "-o", "wide"])
        .status();

    let hub = env.cloudhub_ip().await?;
    eprintln!(
        "quickstart: [6/8] installing edgecore {} from deploy/edge; joining through the \
         cloudhub Service {hub}",
        args.node_name
    );
    install_edge(&env, &edgecore, &args.node_name, hub).await?;

    eprintln!(
        "quickstart: [7/8] waiting for node {} to be Ready",
        args.node_name
    );
    wait_node_ready(&env.client, &args.node_name, timeout)
        .await
        .with_context(|| format!("edgecore's log: {}", edge_log().display()))?;
    let _ = cp
        .kubectl_command()
        .args(["get", "nodes", "-o", "wide"])
        .status();

    eprintln!("quickstart: [8/8] applying a sample Deployment to the edge node");
    sample_deployment(&cp, &args)?;
    eprintln!(
        "quickstart: ready after {:.1?} (images of profile {}); `cargo xtask down` stops it all",
        started.elapsed(),
        args.profile
    );
    println!("export KUBECONFIG={}", cp.kubeconfig().display());
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask images --profile <profile>` (unchanged binaries reuse cargo's and Docker's
/// caches); prints the sizes and returns the static edgecore the edge image holds.
async fn build_images(profile: &str) -> anyhow::Result<PathBuf> {
    let args = images::Args {
        tag: TAG.to_owned(),
        save: None,
        profile: profile.to_owned(),
    };
    let built = tokio::task::spawn_blocking(move || images::build_all(&args)).await??;
    for image in &built {
        eprintln!(
            "  {} {:.1} MB",
            image.reference,
            images::megabytes(image.size)
        );
    }
    built
        .into_iter()
        .find(|b| b.reference == images::reference("edgecore", TAG))
        .map(|b| b.bin)
        .context("no edgecore image was built")
}

/// edgecore's log: `~/.cache/verge/run/quickstart/logs/edgecore.log`.
fn edge_log() -> PathBuf {
    run_dir().join("logs").join("edgecore.log")
}

/// docs/install.md's edge steps: the configuration from `deploy/edge` for `name` and `hub`,
/// `edgecore join` with a new bootstrap token and the Verge CA's pin, then the unit's command line started detached
/// (recorded in the run directory's `pids` and `node` files, which `cargo xtask down` reads).
async fn install_edge(env: &Deployment, bin: &Path, name: &str, hub: IpAddr) -> anyhow::Result<()> {
    // Credentials of an earlier run are from an earlier CA; its Node goes too, as an operator
    // deletes it before a node joins anew (cloudhub refuses a join under an existing Node).
    let _ = std::fs::remove_dir_all(edge_dir());
    verge_testkit::trust::forget_node(&env.client, name).await?;
    let edge = EdgeInstall::configure(&edge_dir(), name, hub, None)?;
    let token =
        create_bootstrap_token(&env.client, TokenKind::Valid, Duration::from_secs(3600)).await?;
    // The Verge CA pinned (docs/install.md, step 3): cloudhub offers no token CA discovery.
    let ca_hash = verge_testkit::trust::verge_ca_hash(&env.client).await?;
    let joined = edge.join(bin, hub, &token, &ca_hash)?;
    if let Some(line) = joined.lines().find(|l| l.contains("joined")) {
        eprintln!("  {}", line.trim());
    }
    let argv = edge.command_line(bin)?;
    let (program, args) = argv.split_first().context("empty ExecStart")?;
    let log = edge_log();
    let pid = daemon::spawn_detached(Path::new(program), args, &[("RUST_LOG", "info")], &log)?;
    eprintln!("  edgecore pid {pid}, log {}", log.display());
    std::fs::write(run_dir().join("pids"), format!("edgecore {pid}\n"))?;
    std::fs::write(run_dir().join("node"), name)?;
    Ok(())
}
