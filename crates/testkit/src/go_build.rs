//! Running the kit's Go build scripts (`build.sh` of the control plane, containerd, Jaeger,
//! the Go mapper, and `cargo xtask conformance`'s e2e.test): Go found on `PATH` or in
//! `/usr/local/go/bin`, the script's progress streamed to this process's stderr, its exit
//! status turned into an error naming the command; and [`CachedBuild`], a program built once
//! into a cache directory (Jaeger, metrics-server, the registry).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

/// `$PATH` with `/usr/local/go/bin` appended, after checking that it holds `go`.
///
/// # Errors
/// No `go` binary on that path (the message says that `what` needs Go).
pub fn go_path(what: &str) -> anyhow::Result<OsString> {
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    path.push(":/usr/local/go/bin");
    if !std::env::split_paths(&path).any(|d| d.join("go").is_file()) {
        bail!("{what} needs Go on PATH or in /usr/local/go/bin");
    }
    Ok(path)
}

/// How to run one build script.
#[derive(Debug, Clone, Copy)]
pub struct Script<'a> {
    /// The script (run with `bash`).
    pub path: &'a Path,
    /// Its arguments.
    pub args: &'a [&'a OsStr],
    /// Extra environment (`PATH` is set from [`go_path`]).
    pub env: &'a [(&'a str, &'a OsStr)],
    /// Run at `nice -n 19` (a long build that must not starve tests running beside it).
    pub low_priority: bool,
}

impl Script<'_> {
    /// Runs the script with `PATH` = `go_path`, stdin empty and stdout on this process's
    /// stderr; blocks until it ends.
    ///
    /// # Errors
    /// It cannot start or exits unsuccessfully (`<script> <args> failed: <status>`).
    pub fn run(&self, go_path: &OsStr) -> anyhow::Result<()> {
        let mut cmd = if self.low_priority {
            let mut c = Command::new("nice");
            c.args(["-n", "19", "bash"]);
            c
        } else {
            Command::new("bash")
        };
        cmd.arg(self.path).args(self.args).env("PATH", go_path);
        for (key, value) in self.env {
            cmd.env(key, value);
        }
        let status = cmd
            .stdin(Stdio::null())
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("running {}", self.path.display()))?;
        if !status.success() {
            let args: Vec<_> = self.args.iter().map(|a| a.to_string_lossy()).collect();
            bail!(
                "{} {} failed: {status}",
                self.path.display(),
                args.join(" ")
            );
        }
        Ok(())
    }
}

/// A Go program the kit builds once into a cache directory with one of its scripts
/// (`<script> <cache-dir> <version>`), which writes the stamp `<cache-dir>/complete` =
/// `v<version>` last.
#[derive(Debug, Clone)]
pub struct CachedBuild {
    /// What is built, for messages (e.g. `Jaeger all-in-one`).
    pub what: &'static str,
    /// The pinned version, without `v`.
    pub version: String,
    /// Where it is built.
    pub cache_dir: PathBuf,
    /// The binary the build leaves.
    pub binary: PathBuf,
    /// The build script.
    pub script: PathBuf,
    /// How long a first build takes, for the message before it (e.g. `5-9 min`).
    pub estimate: &'static str,
}

impl CachedBuild {
    /// Whether the cache holds a complete build: the stamp reads `v<version>` and the binary
    /// exists.
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == format!("v{}", self.version) && self.binary.is_file()
    }

    /// Builds unless [`CachedBuild::is_built`], serialized across processes by
    /// `<cache-dir>.lock`, with the script's progress on stderr (a line at least every 10 s)
    /// and a message before (naming the estimate) and after. Blocks (call it from
    /// `spawn_blocking` in async code).
    ///
    /// # Errors
    /// `go` is missing, the script fails, or it left no binary.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        if self.is_built() {
            return Ok(());
        }
        let mut lock_name = self.cache_dir.clone().into_os_string();
        lock_name.push(".lock");
        let _lock = crate::lock::FileLock::acquire(&PathBuf::from(lock_name))?;
        if self.is_built() {
            return Ok(());
        }
        let path = go_path(&format!("building {}", self.what))?;
        eprintln!(
            "verge-testkit: building {} v{} into {} ({} with cold Go caches, once)",
            self.what,
            self.version,
            self.cache_dir.display(),
            self.estimate,
        );
        let started = Instant::now();
        Script {
            path: &self.script,
            args: &[self.cache_dir.as_os_str(), OsStr::new(&self.version)],
            env: &[],
            low_priority: false,
        }
        .run(&path)?;
        if !self.is_built() {
            bail!(
                "{} finished but {} is missing",
                self.script.display(),
                self.binary.display()
            );
        }
        eprintln!(
            "verge-testkit: {} built in {:.0?}",
            self.what,
            started.elapsed()
        );
        Ok(())
    }
}
