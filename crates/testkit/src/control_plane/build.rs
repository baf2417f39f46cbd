//! Building the pinned control plane from the Kubernetes Go modules (`build.sh`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::ControlPlaneConfig;
use crate::lock::FileLock;

/// The build script shipped with this crate:
/// `crates/testkit/assets/control-plane/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/control-plane/build.sh")
}

impl ControlPlaneConfig {
    /// Whether the cache holds a complete build of [`ControlPlaneConfig::version`]: its
    /// `complete` stamp reads `v<version>` and every binary exists.
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version)
            && super::BINARIES
                .iter()
                .all(|b| self.bin_dir().join(b).is_file())
    }

    /// Builds the control plane into [`ControlPlaneConfig::cache_dir`] unless
    /// [`ControlPlaneConfig::is_built`]. Runs `build.sh` (needs `go` on `PATH` or in
    /// `/usr/local/go/bin`, and the Go module proxy); its progress streams to this
    /// process's stderr. A cold build takes about 10 minutes on 2 cores. Serialized
    /// across processes by `<cache-dir>.lock`.
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
        let mut path = std::env::var_os("PATH").unwrap_or_default();
        path.push(":/usr/local/go/bin");
        let has_go = std::env::split_paths(&path).any(|d| d.join("go").is_file());
        if !has_go {
            bail!(
                "building the control plane needs Go (>= the version in go.mod.in) on PATH \
                 or in /usr/local/go/bin"
            );
        }
        let script = build_script();
        eprintln!(
            "verge-testkit: building Kubernetes v{} control plane into {} (takes ~10 min, once)",
            self.version,
            self.cache_dir.display()
        );
        let started = Instant::now();
        let status = Command::new("bash")
            .arg(&script)
            .arg(&self.cache_dir)
            .arg(&self.version)
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() || !self.is_built() {
            bail!(
                "{} {} {} failed: {status}",
                script.display(),
                self.cache_dir.display(),
                self.version
            );
        }
        eprintln!(
            "verge-testkit: control plane built in {:.0?}",
            started.elapsed()
        );
        Ok(())
    }
}
