//! Detached background processes: spawn, liveness, stop.
//!
//! A daemon is started in its own process group (`process_group(0)`), with stdin from
//! `/dev/null` and stdout/stderr appended to a log file, so it outlives the calling
//! process and keeps no pipe of `cargo test` open. A helper thread reaps it should it
//! exit while the caller still runs (no zombie); after the caller exits, init does.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Spawns `program args` detached, appending its output to `log`; returns its pid.
pub fn spawn_detached(
    program: &Path,
    args: &[String],
    envs: &[(&str, &str)],
    log: &Path,
) -> anyhow::Result<u32> {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    let err = out.try_clone()?;
    let mut child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let pid = child.id();
    std::thread::Builder::new()
        .name(format!("reap-{pid}"))
        .spawn(move || {
            if let Ok(status) = child.wait() {
                exits()
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(pid, status);
            }
        })
        .context("spawning reaper thread")?;
    Ok(pid)
}

/// Exit statuses of daemons this process spawned and reaped, by pid.
fn exits() -> &'static Mutex<HashMap<u32, ExitStatus>> {
    static EXITS: OnceLock<Mutex<HashMap<u32, ExitStatus>>> = OnceLock::new();
    EXITS.get_or_init(Default::default)
}

/// The exit status of a daemon spawned (and reaped) by this process, if it exited.
pub fn exit_status(pid: u32) -> Option<ExitStatus> {
    exits()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&pid)
        .copied()
}

/// A description of why `pid` is not alive, for error messages.
pub fn describe_exit(pid: u32) -> String {
    match exit_status(pid) {
        Some(status) => format!("pid {pid} exited: {status}"),
        None => match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => format!("pid {pid} not alive: /proc stat {:?}", stat.get(..60)),
            Err(_) => format!("pid {pid} is gone"),
        },
    }
}

/// Whether `pid` exists and is not a zombie; with `expect_exe`, also whether its
/// command line's first word ends with that name (guards against pid reuse).
pub fn is_alive(pid: u32, expect_exe: Option<&str>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Field 3 (after "pid (comm) ") is the state; comm may contain spaces or ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, None | Some('Z') | Some('X')) {
        return false;
    }
    match expect_exe {
        None => true,
        // Right after spawn the cmdline can read empty: the vfork parent resumes once
        // execve released the old memory map, before the new argv is published.
        // An empty cmdline therefore counts as "alive, not verifiable".
        Some(exe) => std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                let first = c.split(|b| *b == 0).next().unwrap_or_default();
                first.is_empty() || String::from_utf8_lossy(first).ends_with(exe)
            })
            .unwrap_or(false),
    }
}

/// Sends `signal` (a name such as `TERM`) to the process group led by `pid`, falling
/// back to the process alone. Uses the shell's `kill` builtin (no procps needed).
pub fn signal_group(pid: u32, signal: &str) {
    let group = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "kill -s {signal} -- -{pid} 2>/dev/null || kill -s {signal} {pid} 2>/dev/null"
        ))
        .status();
    if let Err(error) = group {
        tracing::warn!(%error, pid, signal, "kill failed");
    }
}

/// Stops the given daemons one after the other, in the order given (callers pass
/// reverse start order, so e.g. kube-apiserver drains before etcd goes): SIGTERM to
/// the process group, up to `grace` for it to exit, then SIGKILL and up to 5 s more.
/// Returns the pids still alive.
pub fn stop_all(pids: &[u32], grace: Duration) -> Vec<u32> {
    for pid in pids {
        if !is_alive(*pid, None) {
            continue;
        }
        signal_group(*pid, "TERM");
        if !wait_dead(&[*pid], grace) {
            tracing::warn!(pid, ?grace, "daemon ignored SIGTERM; killing");
            signal_group(*pid, "KILL");
            wait_dead(&[*pid], Duration::from_secs(5));
        }
    }
    pids.iter()
        .copied()
        .filter(|p| is_alive(*p, None))
        .collect()
}

/// Polls until none of `pids` is alive or `timeout` passed; true when all are gone.
fn wait_dead(pids: &[u32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids.iter().all(|p| !is_alive(*p, None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
