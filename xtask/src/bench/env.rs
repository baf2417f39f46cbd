//! The environment of a benchmark that runs local Verges with tracing: the host checked, its
//! own control plane, the kit's Jaeger, and the Verge binaries built.

use std::path::{Path, PathBuf};

use verge_testkit::jaeger::{Jaeger, JaegerConfig};
use verge_testkit::{ControlPlane, ControlPlaneConfig};

use crate::local;

/// A control plane in `<run dir>/<name>/control-plane`, Jaeger (started unless it ran
/// already) and the binaries' directory.
pub(super) struct TracedEnv {
    pub(super) cp: ControlPlane,
    pub(super) jaeger: Jaeger,
    /// `<run dir>/<name>`, for the local Verges' directories.
    pub(super) run_dir: PathBuf,
    pub(super) bin_dir: PathBuf,
    config: ControlPlaneConfig,
    jaeger_config: JaegerConfig,
    jaeger_was_running: bool,
}

impl TracedEnv {
    /// Brings everything up; `release` builds the release binaries.
    pub(super) async fn up(name: &str, release: bool) -> anyhow::Result<Self> {
        local::ensure_host().await?;
        let run_dir = verge_testkit::paths::run_dir().join(name);
        let config = ControlPlaneConfig {
            state_dir: run_dir.join("control-plane"),
            ..ControlPlaneConfig::from_env()
        };
        let cp = crate::control_plane::up(&config).await?;
        let jaeger_config = JaegerConfig::from_env();
        let jaeger_was_running = jaeger_config.status().await?.is_some();
        let jaeger = crate::jaeger::up(&jaeger_config).await?;
        let bin_dir = local::build_bins(release)?;
        Ok(Self {
            cp,
            jaeger,
            run_dir,
            bin_dir,
            config,
            jaeger_config,
            jaeger_was_running,
        })
    }

    /// Stops the local Verges of `verges` (their directories) and removes their
    /// containers, then the control plane, and Jaeger unless it ran before.
    pub(super) async fn down(self, verges: &[&Path]) -> anyhow::Result<()> {
        for dir in verges {
            local::stop_processes(dir);
            local::remove_containers(dir);
        }
        crate::control_plane::down(&self.config).await?;
        if !self.jaeger_was_running {
            crate::jaeger::down(&self.jaeger_config).await?;
        }
        Ok(())
    }
}

/// Runs `body` on a fresh control plane of `config` (one left by an interrupted run is
/// stopped first: its objects would collide) with the Verge binaries built (`release` or
/// debug), within `limit`; afterwards, whatever the outcome, stops the processes listed in
/// `<run_dir>/pids` and the control plane. `name` is the benchmark's, for the timeout error.
///
/// # Errors
/// The control plane, the build or `body` failing, or `limit` passing.
pub(super) async fn on_fresh_control_plane<F>(
    name: &str,
    config: &ControlPlaneConfig,
    run_dir: &Path,
    limit: std::time::Duration,
    release: bool,
    body: F,
) -> anyhow::Result<std::process::ExitCode>
where
    F: AsyncFnOnce(&ControlPlane, &Path) -> anyhow::Result<()>,
{
    local::stop_processes(run_dir);
    crate::control_plane::down(config).await?;
    let result = tokio::time::timeout(limit, async {
        let cp = crate::control_plane::up(config).await?;
        let bin_dir = local::build_bins(release)?;
        body(&cp, &bin_dir).await
    })
    .await
    .unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "bench {name} did not finish within {limit:?} (--timeout); logs in {}",
            run_dir.join("logs").display()
        ))
    });
    local::stop_processes(run_dir);
    crate::control_plane::down(config).await?;
    result?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Runs `measure` against one local Verge edge node `node` (Ready) on a control plane of
/// its own in `<run dir>/<name>/control-plane`, with the binaries built as `release`; the
/// kit's streams front runs the same build when `front_from_build` (a benchmark whose bytes
/// pass through it). Stops the node, removes its containers and stops the control plane
/// afterwards, whatever `measure` returned.
///
/// # Errors
/// The host, the build, the control plane, the node or `measure` fail.
pub(super) async fn with_one_node(
    name: &str,
    node: &str,
    release: bool,
    front_from_build: bool,
    measure: impl AsyncFnOnce(&ControlPlane, &local::LocalVerge) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    local::ensure_host().await?;
    let run_dir = verge_testkit::paths::run_dir().join(name);
    let bin_dir = local::build_bins(release)?;
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        front_bin_dir: front_from_build.then(|| bin_dir.clone()),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let dir = run_dir.join(node);
    let result = async {
        let verge = local::start(&dir, &bin_dir, &cp, node, None).await?;
        verge
            .wait_ready(&cp, std::time::Duration::from_secs(60))
            .await?;
        measure(&cp, &verge).await
    }
    .await;
    local::stop_processes(&dir);
    local::remove_containers(&dir);
    crate::control_plane::down(&config).await?;
    result
}

/// In a debug xtask (what `cargo xtask` runs), runs this same command in the release build
/// of xtask and returns its outcome; in a release xtask, `None`: go on. For benchmarks whose
/// hollow edges run in xtask's own process, where unoptimised TLS clients would bound what
/// they measure instead of the cloud. `name` is the benchmark's, for the message.
///
/// # Errors
/// The release build or its run cannot be started.
pub(super) fn in_release(name: &str) -> anyhow::Result<Option<std::process::ExitCode>> {
    use anyhow::Context as _;
    if !cfg!(debug_assertions) {
        return Ok(None);
    }
    let bin_dir = local::build_bins(true)?;
    eprintln!("bench {name}: running the hollow edges in the release build of xtask");
    let status = std::process::Command::new(bin_dir.join("xtask"))
        .args(std::env::args_os().skip(1))
        .status()
        .context("running the release xtask")?;
    Ok(Some(if status.success() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }))
}
