//! Building the pinned distribution registry from its Go module (`assets/registry/build.sh`).

use std::path::PathBuf;

use super::RegistryConfig;

/// The build script shipped with this crate:
/// `crates/testkit/assets/registry/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/registry/build.sh")
}

impl RegistryConfig {
    /// The cached build of this version.
    fn cached_build(&self) -> crate::go_build::CachedBuild {
        crate::go_build::CachedBuild {
            what: "the distribution registry",
            version: self.version.clone(),
            cache_dir: self.cache_dir.clone(),
            binary: self.binary(),
            script: build_script(),
            estimate: "3-5 min",
        }
    }

    /// Whether the cache holds a complete build of [`RegistryConfig::version`]: its `complete`
    /// stamp reads `v<version>` and the binary exists.
    pub fn is_built(&self) -> bool {
        self.cached_build().is_built()
    }

    /// Builds `registry` (the module's `cmd/registry`) into [`RegistryConfig::cache_dir`]
    /// unless [`RegistryConfig::is_built`] (`build.sh`; needs `go` and the Go module proxy;
    /// [`crate::go_build::CachedBuild`]). With empty Go caches it took 2 min 44 s on 2 busy
    /// cores (2.3 CPU-minutes; binary 56 MB); with Go's caches warm, seconds. Blocks (call it
    /// from `spawn_blocking` in async code).
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        self.cached_build().ensure_built()
    }
}
