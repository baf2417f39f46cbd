//! Building the pinned distribution registry from its Go module (`assets/registry/build.sh`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;

use super::RegistryConfig;
use crate::go_build::{Script, go_path};
use crate::lock::FileLock;

/// The build script shipped with this crate:
/// `crates/testkit/assets/registry/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/registry/build.sh")
}

impl RegistryConfig {
    /// Whether the cache holds a complete build of [`RegistryConfig::version`]: its
    /// `complete` stamp reads `v<version>` and the binary exists.
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version) && self.binary().is_file()
    }

    /// Builds `registry` (the module's `cmd/registry`) into [`RegistryConfig::cache_dir`]
    /// unless [`RegistryConfig::is_built`]. Runs `build.sh` (needs `go` on `PATH` or in
    /// `/usr/local/go/bin`, and the Go module proxy); its progress streams to this process's
    /// stderr, a line at least every 10 s. With empty Go caches it took 2 min 44 s on 2 busy
    /// cores (2.3 CPU-minutes; binary 56 MB); with Go's caches warm, seconds. Serialized across
    /// processes by `<cache-dir>.lock`. Blocks (call it from `spawn_blocking` in async code).
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
        let path = go_path("building the test registry (distribution's Go module)")?;
        let script = build_script();
        eprintln!(
            "verge-testkit: building the distribution registry v{} into {} \
             (3-5 min with cold Go caches, once)",
            self.version,
            self.cache_dir.display(),
        );
        let started = Instant::now();
        Script {
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
            "verge-testkit: distribution registry built in {:.0?}",
            started.elapsed()
        );
        Ok(())
    }
}
