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
