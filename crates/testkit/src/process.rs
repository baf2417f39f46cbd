//! Processes a test spawns, and the workspace binaries it spawns.
//!
//! [`ChildProcess`] is a guard: the process is SIGKILLed and reaped when the guard is
//! dropped, so a failing test leaves nothing behind. Its stdout and stderr go to one
//! log file whose tail goes into failure messages ([`ChildProcess::log_tail`]).

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A spawned process, killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Spawns `program` with `args` and extra environment `envs` (added to this
    /// process's environment), stdin from `/dev/null`, stdout and stderr appended to a
    /// fresh log file `<tmp>/verge-test-logs-<uid>/<program name>-<pid>-<n>.log`.
    ///
    /// # Errors
    /// The log file cannot be created or the program cannot be started.
    pub fn spawn<I, S, E, K, V>(program: impl AsRef<Path>, args: I, envs: E) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let program = program.as_ref();
        let mut cmd = Command::new(program);
        cmd.args(args).envs(envs);
        let name = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "process".to_owned());
        Self::spawn_command(&name, cmd, default_log_path(&name)?)
    }

    /// Spawns a prepared `cmd` (its args, env and working directory are kept; stdin,
    /// stdout and stderr are replaced), appending its output to `log_path` (parent
    /// directories are created). `name` labels error messages.
    ///
    /// # Errors
    /// The log file cannot be created or the program cannot be started.
    pub fn spawn_command(
        name: &str,
        mut cmd: Command,
        log_path: impl Into<PathBuf>,
    ) -> anyhow::Result<Self> {
        let log_path = log_path.into();
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening log {}", log_path.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        tracing::debug!(name, pid = child.id(), log = %log_path.display(), "spawned");
        Ok(Self {
            name: name.to_owned(),
            child,
            log_path,
            status: None,
        })
    }

    /// The label given at spawn (the program's file name for [`ChildProcess::spawn`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file holding stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the log (empty when unreadable).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// The whole log so far (empty when unreadable).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Whether the process has not exited yet (reaps it when it has).
    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// The exit status, once the process has exited (non-blocking).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Kills the process with SIGKILL (a crash, as far as the process can tell) and
    /// reaps it. A no-op when it already exited.
    ///
    /// # Errors
    /// The signal cannot be sent or the process cannot be reaped.
    pub fn kill9(&mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_status() {
            return Ok(status);
        }
        self.child
            .kill()
            .with_context(|| format!("killing {}", self.name))?;
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(status)
    }

    /// Graceful stop: SIGTERM, then up to `grace` for the process to exit (polled every
    /// 20 ms without blocking the async runtime), then SIGKILL. Returns the exit status.
    ///
    /// # Errors
    /// The signals cannot be sent or the process cannot be reaped.
    pub async fn terminate(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_status() {
            return Ok(status);
        }
        let pid = self.pid();
        let sent = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .status()
            .or_else(|_| {
                Command::new("sh")
                    .arg("-c")
                    .arg(format!("kill -s TERM {pid}"))
                    .status()
            })
            .with_context(|| format!("sending SIGTERM to {}", self.name))?;
        if !sent.success() && self.is_running() {
            bail!("sending SIGTERM to {} (pid {pid}) failed", self.name);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.try_status() {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(name = %self.name, ?grace, "did not exit after SIGTERM; killing");
        self.kill9()
    }

    /// Waits until the log contains `needle` (polled every 50 ms).
    ///
    /// # Errors
    /// The process exits first, or `timeout` passes; the error holds the log tail.
    pub async fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.try_status() {
                bail!(
                    "{} exited ({status}) before logging {needle:?}; log tail:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not log {needle:?} within {timeout:?}; log tail:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The last `lines` lines of the file at `path` (empty when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A fresh log path `<tmp>/verge-test-logs-<uid>/<name>-<pid>-<n>.log`: one directory per
/// user (the owner of `/proc/self`), so test runs of different users on one machine do not
/// trip over each other's directory.
///
/// The directory outlives test runs, and a later run's test binary can get the same pid
/// (small pid namespaces repeat them), so the file is claimed with `create_new`: a name
/// already taken moves on to the next `n`. The file returned exists and is empty; a log
/// never holds an earlier run's lines (which a test reading its process's log, such as
/// the address a service bound, would otherwise find first).
fn default_log_path(name: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let uid = std::fs::metadata("/proc/self")
        .context("reading the owner of /proc/self")?
        .uid();
    let dir = std::env::temp_dir().join(format!("verge-test-logs-{uid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    claim_log_path(&dir, name, &NEXT)
}

/// Creates (empty) and returns the first `<dir>/<name>-<pid>-<n>.log` that does not exist
/// yet, `n` taken from `next` (which counts up across the process).
///
/// # Errors
/// A file cannot be created for a reason other than its name being taken.
fn claim_log_path(dir: &Path, name: &str, next: &AtomicU64) -> anyhow::Result<PathBuf> {
    loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{name}-{}-{n}.log", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
}

/// The path of the workspace binary `name` (e.g. `"cloudhub"`, `"edgecore"`).
///
/// Looked up in `$VERGE_BIN_DIR` when set, else next to the running executable's
/// profile directory: a test binary `target/<profile>/deps/<test>-<hash>` gives
/// `target/<profile>/<name>`, an executable in `target/<profile>/` gives its sibling.
///
/// # Errors
/// The binary does not exist (the message says to run `cargo build --bins` first).
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("VERGE_BIN_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().context("locating the current executable")?;
            let parent = exe
                .parent()
                .context("current executable has no parent directory")?;
            if parent.file_name() == Some(OsStr::new("deps")) {
                parent.parent().unwrap_or(parent).to_owned()
            } else {
                parent.to_owned()
            }
        }
    };
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "workspace binary {name:?} not found at {}: run `cargo build --bins` first \
             (or set VERGE_BIN_DIR)",
            path.display()
        );
    }
    Ok(path)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`: peak resident set); `None` when
/// the process or the field is missing.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_name_left_by_an_earlier_run_is_not_reused() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let pid = std::process::id();
        let stale = dir.path().join(format!("cloudhub-{pid}-0.log"));
        std::fs::write(&stale, "health endpoint serving addr=127.0.0.1:1\n")?;
        let next = AtomicU64::new(0);

        let first = claim_log_path(dir.path(), "cloudhub", &next)?;
        let second = claim_log_path(dir.path(), "cloudhub", &next)?;

        assert_eq!(first, dir.path().join(format!("cloudhub-{pid}-1.log")));
        assert_eq!(second, dir.path().join(format!("cloudhub-{pid}-2.log")));
        assert_eq!(
            std::fs::read(&first)?.len(),
            0,
            "a claimed log starts empty"
        );
        assert_eq!(
            std::fs::read_to_string(&stale)?,
            "health endpoint serving addr=127.0.0.1:1\n",
            "the earlier run's log is left as it was"
        );
        Ok(())
    }
}
