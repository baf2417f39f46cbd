//! Building `e2e.test` and `agnhost` of the pinned Kubernetes release from its Go module
//! (`xtask/assets/conformance/build.sh`), cached like the test kit's control plane.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

/// The way the binaries are built, in the stamp: a cache built another way is built again.
const BUILD_REVISION: &str = "conformance-suite-1";

/// The cache of one release's conformance binaries: `~/.cache/verge/conformance/v<version>`,
/// holding `src/` (the Go module), `bin/e2e.test`, `bin/agnhost` and the stamp `complete`.
#[derive(Debug, Clone)]
pub struct E2eBuild {
    /// The Kubernetes release, e.g. `1.37.1` (the control plane's, [`verge_testkit::ControlPlaneConfig::version`]).
    pub version: String,
    /// The cache directory.
    pub cache_dir: PathBuf,
}

impl E2eBuild {
    /// The cache of `version` under `~/.cache/verge/conformance/`.
    pub fn new(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            cache_dir: verge_testkit::paths::verge_home()
                .join("conformance")
                .join(format!("v{version}")),
        }
    }

    /// The e2e test binary: the spec packages `test/e2e/common/{node,storage,network}` and
    /// `test/e2e/network` with the e2e framework (`xtask/assets/conformance/nodeconformance`), `go test -c`.
    pub fn e2e_test(&self) -> PathBuf {
        self.cache_dir.join("bin").join("e2e.test")
    }

    /// The static agnhost binary (`k8s.io/kubernetes/test/images/agnhost`).
    pub fn agnhost(&self) -> PathBuf {
        self.cache_dir.join("bin").join("agnhost")
    }

    /// The Ginkgo CLI (`github.com/onsi/ginkgo/v2/ginkgo`, the version the release requires),
    /// which runs e2e.test in parallel processes.
    pub fn ginkgo(&self) -> PathBuf {
        self.cache_dir.join("bin").join("ginkgo")
    }

    /// Builds [`E2eBuild::ginkgo`] in the built module unless it exists (seconds: its
    /// packages are mostly compiled already for e2e.test).
    ///
    /// # Errors
    /// As [`E2eBuild::go_build`].
    pub fn ensure_ginkgo(&self) -> anyhow::Result<()> {
        if self.ginkgo().is_file() {
            return Ok(());
        }
        eprintln!("conformance: building the Ginkgo CLI");
        self.go_build("github.com/onsi/ginkgo/v2/ginkgo", &self.ginkgo())
    }

    /// The release's sources in the Go module cache (`$GOMODCACHE/k8s.io/kubernetes@v<version>`),
    /// e2e.test's `--repo-root` and the source of the pause image.
    pub fn kubernetes_source(&self) -> PathBuf {
        go_mod_cache().join(format!("k8s.io/kubernetes@v{}", self.version))
    }

    /// Whether the stamp `complete` reads `v<version> <BUILD_REVISION>` and both binaries
    /// exist.
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{} {BUILD_REVISION}", self.version)
            && self.e2e_test().is_file()
            && self.agnhost().is_file()
    }

    /// Builds both binaries unless [`E2eBuild::is_built`], at `nice -n 19`, streaming
    /// `build.sh`'s progress to stderr; says beforehand that a cold build takes minutes.
    /// Returns whether it built.
    ///
    /// # Errors
    /// Go is missing (`PATH` or `/usr/local/go/bin`), or the build fails.
    pub fn ensure_built(&self) -> anyhow::Result<bool> {
        if self.is_built() {
            return Ok(false);
        }
        let script = build_script();
        eprintln!(
            "conformance: building e2e.test and agnhost of Kubernetes v{} into {} \
             (a cold build takes 10-30 minutes on 2 cores; cached afterwards)",
            self.version,
            self.cache_dir.display()
        );
        let started = Instant::now();
        verge_testkit::go_build::Script {
            path: &script,
            args: &[
                self.cache_dir.as_os_str(),
                self.version.as_ref(),
                BUILD_REVISION.as_ref(),
            ],
            env: &[],
            low_priority: true,
        }
        .run(&go_path()?)?;
        if !self.is_built() {
            bail!(
                "{} finished but e2e.test or agnhost is missing from {}",
                script.display(),
                self.cache_dir.display()
            );
        }
        eprintln!(
            "conformance: e2e.test and agnhost built in {:.0?}",
            started.elapsed()
        );
        Ok(true)
    }

    /// `go build` of the package `package` (of the release's module) into `out`: static,
    /// in the built module (`src/`), at `nice -n 19`; incremental after [`E2eBuild::ensure_built`].
    ///
    /// # Errors
    /// Go is missing, or the build fails (its stderr is in the error).
    pub fn go_build(&self, package: &str, out: &Path) -> anyhow::Result<()> {
        let output = Command::new("nice")
            .args([
                "-n",
                "19",
                "go",
                "build",
                "-trimpath",
                "-ldflags=-s -w",
                "-o",
            ])
            .arg(out)
            .arg(package)
            .current_dir(self.cache_dir.join("src"))
            .env("PATH", go_path()?)
            .env("GOFLAGS", "-mod=mod")
            .env("CGO_ENABLED", "0")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running go build {package}"))?;
        if !output.status.success() {
            bail!(
                "go build {package} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

/// `xtask/assets/conformance/build.sh <cache-dir> <version>`.
fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/conformance/build.sh")
}

/// `$PATH` with Go ([`verge_testkit::go_build::go_path`]).
fn go_path() -> anyhow::Result<std::ffi::OsString> {
    verge_testkit::go_build::go_path("building e2e.test")
}

/// `$GOMODCACHE`, else `$GOPATH/pkg/mod`, else `~/go/pkg/mod` (Go's defaults).
fn go_mod_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("GOMODCACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(first) = std::env::var_os("GOPATH")
        .as_deref()
        .and_then(|p| std::env::split_paths(p).next())
    {
        return first.join("pkg/mod");
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join("go/pkg/mod")
}
