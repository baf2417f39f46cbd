//! Building the pinned metrics-server from its Go module (`assets/metrics-server/build.sh`)
//! and its image: the static binary alone in an image of its own (`docker import`, no base
//! image or registry), tagged as the release's manifests name it ([`super::IMAGE`]).

use std::path::PathBuf;

use anyhow::Context as _;

use super::{IMAGE, MetricsServerConfig};

/// The build script shipped with this crate:
/// `crates/testkit/assets/metrics-server/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/metrics-server/build.sh")
}

/// The image label holding the binary's build stamp (an image from another build is
/// replaced).
const STAMP_LABEL: &str = "io.verge.metrics-server.build";

impl MetricsServerConfig {
    /// The cached build of this version.
    fn cached_build(&self) -> crate::go_build::CachedBuild {
        crate::go_build::CachedBuild {
            what: "metrics-server",
            version: self.version.clone(),
            cache_dir: self.cache_dir.clone(),
            binary: self.binary(),
            script: build_script(),
            estimate: "~4 min",
        }
    }

    /// Whether the cache holds a complete build of [`MetricsServerConfig::version`]: its `complete`
    /// stamp reads `v<version>` and the binary exists.
    pub fn is_built(&self) -> bool {
        self.cached_build().is_built()
    }

    /// Builds `metrics-server` into [`MetricsServerConfig::cache_dir`] unless
    /// [`MetricsServerConfig::is_built`]: about 4 minutes with cold Go caches on 2 cores
    /// (progress on stderr every 10 s; [`crate::go_build::CachedBuild`]), seconds when warm.
    /// Blocks.
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        self.cached_build().ensure_built()
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
