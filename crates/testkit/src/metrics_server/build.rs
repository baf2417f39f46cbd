//! Building the pinned metrics-server from its Go module (`assets/metrics-server/build.sh`)
//! and its image: the static binary alone in an image of its own (`docker import`, no base
//! image or registry), tagged as the release's manifests name it ([`super::IMAGE`]).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{IMAGE, MetricsServerConfig};
use crate::control_plane::go_path;
use crate::lock::FileLock;

/// The build script shipped with this crate:
/// `crates/testkit/assets/metrics-server/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/metrics-server/build.sh")
}

/// The image label holding the binary's build stamp (an image from another build is
/// replaced).
const STAMP_LABEL: &str = "io.verge.metrics-server.build";

impl MetricsServerConfig {
    /// Whether the cache holds a complete build of [`MetricsServerConfig::version`].
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version) && self.binary().is_file()
    }

    /// Builds `metrics-server` into [`MetricsServerConfig::cache_dir`] unless
    /// [`MetricsServerConfig::is_built`]: about 4 minutes with cold Go caches on 2 cores
    /// (progress on stderr every 10 s), seconds when warm. Serialized across processes by
    /// `<cache-dir>.lock`. Blocks.
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        if self.is_built() {
            return Ok(());
        }
        let mut lock_name = self.cache_dir.clone().into_os_string();
        lock_name.push(".lock");
        let _lock = FileLock::acquire(&PathBuf::from(lock_name))?;
        if self.is_built() {
            return Ok(());
        }
        let path = go_path()?;
        let script = build_script();
        eprintln!(
            "verge-testkit: building metrics-server v{} into {} (~4 min with cold Go caches, once)",
            self.version,
            self.cache_dir.display(),
        );
        let started = Instant::now();
        crate::go_build::Script {
            path: &script,
            args: &[self.cache_dir.as_os_str(), self.version.as_ref()],
            env: &[],
            low_priority: false,
        }
        .run(&path)?;
        if !self.is_built() {
            bail!(
                "{} finished but {} is missing",
                script.display(),
                self.binary().display()
            );
        }
        eprintln!(
            "verge-testkit: metrics-server built in {:.0?}",
            started.elapsed()
        );
        Ok(())
    }

    /// Builds the binary (see [`ensure_built`](Self::ensure_built)) and the local Docker
    /// image [`IMAGE`] of it, unless an image of this build exists. Blocks.
    ///
    /// # Errors
    /// The build fails, or `docker import` does.
    pub fn ensure_image(&self) -> anyhow::Result<()> {
        self.ensure_built()?;
        let modified = std::fs::metadata(self.binary())?
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let stamp = format!("v{}-{modified}", self.version);
        let label = format!("{{{{index .Config.Labels \"{STAMP_LABEL}\"}}}}");
        let current = crate::docker::docker(&["image", "inspect", "-f", &label, IMAGE]);
        if current.is_ok_and(|s| s.trim() == stamp) {
            return Ok(());
        }
        let root = tempfile::tempdir()?;
        std::fs::create_dir(root.path().join("tmp"))?;
        std::fs::copy(self.binary(), root.path().join("metrics-server"))
            .context("copying the metrics-server binary")?;
        crate::docker::import_rootfs(
            root.path(),
            IMAGE,
            &[
                "ENTRYPOINT [\"/metrics-server\"]",
                "USER 65534:65534",
                &format!("LABEL {STAMP_LABEL}={stamp}"),
            ],
        )
    }
}
