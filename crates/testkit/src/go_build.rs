//! Running the kit's Go build scripts (`build.sh` of the control plane, containerd, Jaeger,
//! the Go mapper, and `cargo xtask conformance`'s e2e.test): Go found on `PATH` or in
//! `/usr/local/go/bin`, the script's progress streamed to this process's stderr, its exit
//! status turned into an error naming the command.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Stdio};

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
