//! Building the pinned Jaeger all-in-one from its Go module (`assets/jaeger/build.sh`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;

use super::JaegerConfig;
use crate::control_plane::go_path;
use crate::lock::FileLock;

/// The build script shipped with this crate:
/// `crates/testkit/assets/jaeger/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/jaeger/build.sh")
}

impl JaegerConfig {
    /// Whether the cache holds a complete build of [`JaegerConfig::version`]: its
    /// `complete` stamp reads `v<version>` and the binary exists.
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version) && self.binary().is_file()
    }

    /// Builds `jaeger-all-in-one` into [`JaegerConfig::cache_dir`] unless
    /// [`JaegerConfig::is_built`]. Runs `build.sh` (needs `go` on `PATH` or in
    /// `/usr/local/go/bin`, and the Go module proxy); its progress streams to this process's
    /// stderr, a line at least every 10 s. With empty Go caches it took 8.5 minutes on 2
    /// busy cores (5 CPU-minutes; binary 52 MB); with Go's caches warm, seconds. Serialized across processes by
    /// `<cache-dir>.lock`. Blocks (call it from `spawn_blocking` in async code).
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
            "verge-testkit: building Jaeger v{} all-in-one into {} (5-9 min with cold Go caches, once)",
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
        eprintln!("verge-testkit: Jaeger built in {:.0?}", started.elapsed());
        Ok(())
    }
}
