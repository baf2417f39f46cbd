//! Building the pinned control plane from the Kubernetes Go modules (`build.sh`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;

use super::ControlPlaneConfig;
use crate::lock::FileLock;

/// The build script shipped with this crate:
/// `crates/testkit/assets/control-plane/build.sh <cache-dir> <version>`.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/control-plane/build.sh")
}

/// A set of binaries `build.sh` builds, with its stamp file.
#[derive(Debug, Clone, Copy)]
struct BuildSet {
    /// `build.sh`'s third argument.
    name: &'static str,
    /// The stamp file in the cache directory, reading `v<version>` once built.
    stamp: &'static str,
    /// The binaries in `<cache>/bin`.
    binaries: &'static [&'static str],
    /// How long a build takes (progress message).
    expected: &'static str,
}

const CONTROL_PLANE: BuildSet = BuildSet {
    name: "control-plane",
    stamp: "complete",
    binaries: super::BINARIES,
    expected: "~10 min",
};

const NODE: BuildSet = BuildSet {
    name: "node",
    stamp: "complete-node",
    binaries: super::NODE_BINARIES,
    expected: "~1.5 min after the control plane",
};

impl ControlPlaneConfig {
    /// Whether the cache holds a complete build of [`ControlPlaneConfig::version`]: its
    /// `complete` stamp reads `v<version>` and every binary exists.
    pub fn is_built(&self) -> bool {
        self.is_set_built(CONTROL_PLANE)
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
        self.ensure_set_built(CONTROL_PLANE)
    }

    /// Whether the cache holds kubelet and kube-proxy of [`ControlPlaneConfig::version`]
    /// (stamp `complete-node`), for the kit's kubelet node.
    pub fn is_node_built(&self) -> bool {
        self.is_set_built(NODE)
    }

    /// Builds kubelet and kube-proxy into `<cache-dir>/bin` unless
    /// [`ControlPlaneConfig::is_node_built`] (`build.sh <cache> <version> node`). Shares
    /// the Go module and build cache with the control plane: after the control plane's
    /// build it takes about 1.5 minutes on 2 cores. Serialized with
    /// [`ControlPlaneConfig::ensure_built`] by `<cache-dir>.lock`.
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_node_built(&self) -> anyhow::Result<()> {
        self.ensure_set_built(NODE)
    }

    fn is_set_built(&self, set: BuildSet) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join(set.stamp)).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version)
            && set
                .binaries
                .iter()
                .all(|b| self.bin_dir().join(b).is_file())
    }

    fn ensure_set_built(&self, set: BuildSet) -> anyhow::Result<()> {
        if self.is_set_built(set) {
            return Ok(());
        }
        let mut lock_name = self.cache_dir.clone().into_os_string();
        lock_name.push(".lock");
        let _lock = FileLock::acquire(&PathBuf::from(lock_name))?;
        if self.is_set_built(set) {
            return Ok(());
        }
        let path = go_path()?;
        let script = build_script();
        eprintln!(
            "verge-testkit: building Kubernetes v{} {} into {} (takes {}, once)",
            self.version,
            set.name,
            self.cache_dir.display(),
            set.expected,
        );
        let started = Instant::now();
        crate::go_build::Script {
            path: &script,
            args: &[
                self.cache_dir.as_os_str(),
                self.version.as_ref(),
                set.name.as_ref(),
            ],
            env: &[],
            low_priority: false,
        }
        .run(&path)?;
        if !self.is_set_built(set) {
            bail!(
                "{} finished but the {} binaries are missing from {}",
                script.display(),
                set.name,
                self.bin_dir().display()
            );
        }
        eprintln!(
            "verge-testkit: {} built in {:.0?}",
            set.name,
            started.elapsed()
        );
        Ok(())
    }
}

/// `$PATH` with Go for the control plane's build ([`crate::go_build::go_path`]).
///
/// # Errors
/// No `go` binary.
pub(crate) fn go_path() -> anyhow::Result<std::ffi::OsString> {
    crate::go_build::go_path(
        "building the test kit's Kubernetes components (Go >= the version in go.mod.in)",
    )
}
