//! Everything a node needs before it starts ([`KubeletNodeConfig::ensure_built`]), and
//! building containerd from its Go module (`assets/containerd/build.sh`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;

use super::{CONTAINERD_VERSION, DEBIAN_PACKAGES, KubeletNodeConfig, images};
use crate::lock::FileLock;
use crate::{ControlPlaneConfig, docker, packages};

/// The binaries `assets/containerd/build.sh` puts into `<containerd cache>/bin`.
const CONTAINERD_BINARIES: &[&str] = &["containerd", "containerd-shim-runc-v2", "ctr"];

/// `crates/testkit/assets/containerd/build.sh <cache-dir> <version>`.
fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/containerd/build.sh")
}

impl KubeletNodeConfig {
    /// Prepares everything a node needs, so that [`KubeletNodeConfig::up`] only starts
    /// processes: installs [`DEBIAN_PACKAGES`], builds kubelet and kube-proxy of `cp`'s
    /// release into its cache ([`ControlPlaneConfig::ensure_node_built`], ~1.5 min after
    /// the control plane's build) and containerd
    /// ([`KubeletNodeConfig::ensure_containerd_built`], ~3.5 min), starts Docker if needed
    /// and builds the pause image [`super::PAUSE_IMAGE`] (seconds). Each step is skipped
    /// when done before; progress goes to stderr. Blocks (call it from `spawn_blocking` in
    /// async code); `cargo xtask` can call it as a visible step before tests run.
    ///
    /// # Errors
    /// A package, build or Docker step fails.
    pub fn ensure_built(&self, cp: &ControlPlaneConfig) -> anyhow::Result<()> {
        packages::ensure_debian_packages(DEBIAN_PACKAGES)?;
        cp.ensure_node_built()?;
        self.ensure_containerd_built()?;
        docker::ensure_docker()?;
        images::ensure_pause_image()
    }

    /// Whether the containerd cache holds a complete build of [`CONTAINERD_VERSION`].
    pub fn is_containerd_built(&self) -> bool {
        let stamp =
            std::fs::read_to_string(self.containerd_cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{CONTAINERD_VERSION}")
            && CONTAINERD_BINARIES
                .iter()
                .all(|b| self.containerd_bin_dir().join(b).is_file())
    }

    /// Builds containerd, containerd-shim-runc-v2 and ctr (static, no cgo; without the
    /// btrfs, devmapper and zfs snapshotters) into [`KubeletNodeConfig::containerd_cache_dir`]
    /// unless [`KubeletNodeConfig::is_containerd_built`]. Needs Go and the module proxy;
    /// about 3.5 minutes on 2 cores, once; progress streams to stderr. Serialized across
    /// processes by `<cache-dir>.lock`.
    ///
    /// # Errors
    /// `go` is missing, or the build script fails.
    pub fn ensure_containerd_built(&self) -> anyhow::Result<()> {
        if self.is_containerd_built() {
            return Ok(());
        }
        let mut lock_name = self.containerd_cache_dir.clone().into_os_string();
        lock_name.push(".lock");
        let _lock = FileLock::acquire(&PathBuf::from(lock_name))?;
        if self.is_containerd_built() {
            return Ok(());
        }
        let path = crate::control_plane::go_path()?;
        let script = build_script();
        eprintln!(
            "verge-testkit: building containerd v{CONTAINERD_VERSION} into {} (takes ~3.5 min, once)",
            self.containerd_cache_dir.display()
        );
        let started = Instant::now();
        crate::go_build::Script {
            path: &script,
            args: &[
                self.containerd_cache_dir.as_os_str(),
                CONTAINERD_VERSION.as_ref(),
            ],
            env: &[],
            low_priority: false,
        }
        .run(&path)?;
        if !self.is_containerd_built() {
            bail!(
                "{} finished but containerd is missing from {}",
                script.display(),
                self.containerd_cache_dir.display()
            );
        }
        eprintln!(
            "verge-testkit: containerd built in {:.0?}",
            started.elapsed()
        );
        Ok(())
    }
}
