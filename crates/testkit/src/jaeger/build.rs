//! Building the pinned Jaeger all-in-one from its Go module (`assets/jaeger/build.sh`).

use std::path::PathBuf;

use super::JaegerConfig;

/// The build script shipped with this crate:
/// `crates/testkit/assets/jaeger/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/jaeger/build.sh")
}

impl JaegerConfig {
    /// The cached build of this version.
    fn cached_build(&self) -> crate::go_build::CachedBuild {
        crate::go_build::CachedBuild {
            what: "Jaeger all-in-one",
            version: self.version.clone(),
            cache_dir: self.cache_dir.clone(),
            binary: self.binary(),
            script: build_script(),
            estimate: "5-9 min",
        }
    }

    /// Whether the cache holds a complete build of [`JaegerConfig::version`]: its `complete`
    /// stamp reads `v<version>` and the binary exists.
    pub fn is_built(&self) -> bool {
        self.cached_build().is_built()
    }

    /// Builds `jaeger-all-in-one` into [`JaegerConfig::cache_dir`] unless
    /// [`JaegerConfig::is_built`] (`build.sh`; needs `go` on `PATH` or in `/usr/local/go/bin`,
    /// and the Go module proxy; [`crate::go_build::CachedBuild`]). With empty Go caches it
    /// took 8.5 minutes on 2 busy cores (5 CPU-minutes; binary 52 MB); with Go's caches warm,
    /// seconds. Blocks (call it from `spawn_blocking` in async code).
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        self.cached_build().ensure_built()
    }
}
