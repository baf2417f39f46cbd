//! `cargo xtask quickstart`: the main job on one machine — a local Kubernetes control
//! plane, cloudhub, edgecontroller and one edgecore, all as background processes.
//!
//! Steps (each prints progress): Debian packages, Docker and the test image; the control
//! plane (built once into the cache, then started; its state in
//! `~/.cache/verge/run/quickstart/control-plane`); `cargo build --bins`; the three Verge
//! processes (configs, logs and pids in `~/.cache/verge/run/quickstart/`); then it waits
//! until the edge node is Ready, prints `kubectl get nodes -o wide` and the
//! `export KUBECONFIG=...` line, and exits 0. `cargo xtask down` stops everything.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use verge_testkit::ControlPlaneConfig;
use verge_testkit::daemon;

/// Arguments of `cargo xtask quickstart`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of the edge node to start.
    #[arg(long, default_value = "verge-edge-1")]
    pub node_name: String,
    /// How long to wait for the edge node to be Ready.
    #[arg(long, default_value = "120s", value_parser = humantime_parse)]
    pub timeout: Duration,
}

fn humantime_parse(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration {s:?}: use e.g. 90s or 2m")),
    }
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
    eprintln!("quickstart: [1/5] Debian packages, Docker engine and the local test image");
    tokio::task::spawn_blocking(|| -> anyhow::Result<()> {
        verge_testkit::packages::ensure_packages()?;
        verge_testkit::docker::ensure_docker()?;
        verge_testkit::docker::ensure_test_image()
    })
    .await??;

    eprintln!("quickstart: [2/5] Kubernetes control plane (the first build takes ~10 minutes)");
    let config = control_plane_config();
    let cp = crate::control_plane::up(&config).await?;

    eprintln!("quickstart: [3/5] cargo build --bins");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--workspace", "--bins"])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build failed: {status}");
    }
    let bin_dir = std::env::current_exe()?
        .parent()
        .context("xtask has no parent directory")?
        .to_owned();

    eprintln!("quickstart: [4/5] starting cloudhub, edgecontroller and edgecore");
    let dir = run_dir();
    stop_processes(&dir);
    std::fs::create_dir_all(dir.join("logs"))?;
    let edge_port = free_port()?;
    let ctrl_port = free_port()?;
    let kubeconfig = cp.kubeconfig().display().to_string();
    let cloudhub_cfg = write(
        &dir,
        "cloudhub.yaml",
        &format!("edge_addr: 127.0.0.1:{edge_port}\ncontroller_addr: 127.0.0.1:{ctrl_port}\n"),
    )?;
    let edgecore_cfg = write(
        &dir,
        "edgecore.yaml",
        &format!(
            "node_name: {}\ncloudhub: http://127.0.0.1:{edge_port}\ndata_dir: {}\n",
            args.node_name,
            dir.join("edge").display()
        ),
    )?;
    let mut pids = Vec::new();
    for (name, argv) in [
        ("cloudhub", vec!["--config".to_owned(), cloudhub_cfg]),
        (
            "edgecontroller",
            vec![
                "--cloudhub".to_owned(),
                format!("http://127.0.0.1:{ctrl_port}"),
                "--kubeconfig".to_owned(),
                kubeconfig.clone(),
            ],
        ),
        ("edgecore", vec!["--config".to_owned(), edgecore_cfg]),
    ] {
        let log = dir.join("logs").join(format!("{name}.log"));
        let pid = daemon::spawn_detached(&bin_dir.join(name), &argv, &[], &log)?;
        eprintln!("quickstart:   {name} pid {pid}, log {}", log.display());
        pids.push(format!("{name} {pid}"));
        if name == "cloudhub" {
            wait_port(edge_port, Duration::from_secs(20)).await?;
        }
    }
    std::fs::write(dir.join("pids"), pids.join("\n") + "\n")?;

    eprintln!(
        "quickstart: [5/5] waiting for node {} to be Ready",
        args.node_name
    );
    let nodes: Api<Node> = Api::all(cp.client().await?);
    let deadline = Instant::now() + args.timeout;
    loop {
        let ready = nodes.get_opt(&args.node_name).await?.is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "node {} not Ready after {:?}; see the logs in {}",
                args.node_name,
                args.timeout,
                dir.join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = cp
        .kubectl_command()
        .args(["get", "nodes", "-o", "wide"])
        .status();
    eprintln!(
        "quickstart: ready after {:.1?}; `cargo xtask down` stops it all",
        started.elapsed()
    );
    println!("export KUBECONFIG={kubeconfig}");
    Ok(ExitCode::SUCCESS)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.display().to_string())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_port(port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("nothing listens on 127.0.0.1:{port} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Stops the processes listed in `<dir>/pids` (reverse start order; SIGTERM, then SIGKILL).
/// Returns how many were listed.
pub fn stop_processes(dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join("pids")) else {
        return 0;
    };
    let mut pids: Vec<u32> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    pids.reverse();
    daemon::stop_all(&pids, Duration::from_secs(10));
    let _ = std::fs::remove_file(dir.join("pids"));
    pids.len()
}
