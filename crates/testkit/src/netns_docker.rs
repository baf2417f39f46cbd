//! A Docker engine of its own inside a network namespace: an edge "host" of the two-site test
//! kit (issue 32) whose pods, pod network, bridge and iptables rules are really separate from
//! the host's and from other edges'.
//!
//! `dockerd` runs in the namespace (entered with `nsenter --net`) with its own data root, exec root
//! (so its own managed containerd), socket, pidfile and cgroup parent, and no default bridge;
//! everything lives under one directory that is removed when the engine stops. Images come
//! from the host's engine (`docker save | docker load`): no registry is reachable.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::daemon;
use crate::netns::EdgeNetns;
use crate::process::ChildProcess;

/// One `dockerd` in a network namespace. Stopped (its containers removed first) on drop,
/// unless started detached ([`NetnsDocker::start_detached`]).
#[derive(Debug)]
pub struct NetnsDocker {
    dir: PathBuf,
    process: Option<ChildProcess>,
}

impl NetnsDocker {
    /// Starts `dockerd` in `ns` with everything under `dir` (created; emptied first), and
    /// waits until it answers (at most 60 s).
    ///
    /// # Errors
    /// `dockerd` is missing, exits, or does not answer in time (its log is in the error).
    pub fn start(ns: &EdgeNetns, dir: &Path) -> anyhow::Result<Self> {
        let (nsenter, args) = dockerd_command(ns, dir)?;
        let mut cmd = Command::new(nsenter);
        cmd.args(&args);
        let process = ChildProcess::spawn_command("dockerd", cmd, dir.join("dockerd.log"))?;
        let this = Self {
            dir: dir.to_owned(),
            process: Some(process),
        };
        this.wait_answering(ns)?;
        Ok(this)
    }

    /// Like [`NetnsDocker::start`], with `dockerd` a detached daemon
    /// ([`crate::daemon::spawn_detached`]) that outlives this process: dropping the value
    /// leaves it running. [`NetnsDocker::stop_detached`] stops it, [`NetnsDocker::attach`]
    /// reaches it again.
    ///
    /// # Errors
    /// As [`NetnsDocker::start`]; a `dockerd` that does not answer is stopped.
    pub fn start_detached(ns: &EdgeNetns, dir: &Path) -> anyhow::Result<Self> {
        let (nsenter, args) = dockerd_command(ns, dir)?;
        let pid = daemon::spawn_detached(&nsenter, &args, &[], &dir.join("dockerd.log"))?;
        let this = Self::attach(dir);
        if let Err(error) = this.wait_answering(ns) {
            daemon::stop_all(&[pid], Duration::from_secs(10));
            return Err(error);
        }
        Ok(this)
    }

    /// The engine [`NetnsDocker::start_detached`] started in `dir`, maybe from another
    /// process: for [`NetnsDocker::docker`] and [`NetnsDocker::load_image`]. Dropping it
    /// leaves the engine running.
    pub fn attach(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            process: None,
        }
    }

    /// Stops the engine [`NetnsDocker::start_detached`] started in `dir`: removes every
    /// container, stops `dockerd` (the pid of its pidfile: SIGTERM to its process group, SIGKILL
    /// after 20 s), unmounts what it left under `dir` (a killed engine's overlays and
    /// namespace files) and removes `dir`. An engine that is not running is skipped. Returns
    /// whether one ran.
    pub fn stop_detached(dir: &Path) -> bool {
        let this = Self::attach(dir);
        this.remove_containers();
        let pid = std::fs::read_to_string(dir.join("dockerd.pid"))
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .filter(|pid| daemon::is_alive(*pid, Some("dockerd")));
        if let Some(pid) = pid {
            daemon::stop_all(&[pid], Duration::from_secs(20));
        }
        if let Err(error) = crate::mounts::unmount_under(dir) {
            eprintln!("verge-testkit: {error:#}");
        }
        this.remove_dir();
        pid.is_some()
    }

    /// Waits until the engine answers (at most 60 s).
    fn wait_answering(&self, ns: &EdgeNetns) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .docker(&["version", "--format", "{{.Server.Version}}"])
            .is_err()
        {
            if Instant::now() > deadline {
                bail!(
                    "dockerd in {} did not answer within 60 s:\n{}",
                    ns.name(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// The engine's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    /// The endpoint for edgecore's `edged.containerRuntimeEndpoint`: `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// `docker -H <this engine> <args>`; its stdout.
    ///
    /// # Errors
    /// docker fails (its stderr is in the error).
    pub fn docker(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("docker")
            .arg("-H")
            .arg(self.endpoint())
            .args(args)
            .output()
            .context("running docker")?;
        if !out.status.success() {
            bail!(
                "docker {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Copies `reference` from the host's engine into this one (`docker save | docker load`).
    ///
    /// # Errors
    /// The image is not on the host, or the copy fails.
    pub fn load_image(&self, reference: &str) -> anyhow::Result<()> {
        let mut save = Command::new("docker")
            .args(["save", reference])
            .stdout(Stdio::piped())
            .spawn()
            .context("docker save")?;
        let stdout = save.stdout.take().context("docker save's stdout")?;
        let load = Command::new("docker")
            .arg("-H")
            .arg(self.endpoint())
            .args(["load", "--quiet"])
            .stdin(stdout)
            .output()
            .context("docker load")?;
        let saved = save.wait()?;
        if !saved.success() || !load.status.success() {
            bail!(
                "copying {reference} into {}: save {saved}, load {}: {}",
                self.dir.display(),
                load.status,
                String::from_utf8_lossy(&load.stderr).trim()
            );
        }
        Ok(())
    }

    /// The last lines of dockerd's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Removes every container, stops dockerd (SIGTERM, then SIGKILL after 20 s) and, when
    /// nothing is mounted under its directory any more, removes the directory.
    ///
    /// # Errors
    /// dockerd cannot be signalled.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> anyhow::Result<()> {
        let Some(mut process) = self.process.take() else {
            return Ok(());
        };
        self.remove_containers();
        let _ = Command::new("kill")
            .args(["-TERM", &process.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while process.try_status().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        process.kill9()?;
        self.remove_dir();
        Ok(())
    }

    /// Removes every container of the engine (when it answers).
    fn remove_containers(&self) {
        if let Ok(ids) = self.docker(&["ps", "-aq"]) {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids);
                let _ = self.docker(&args);
            }
        }
    }

    /// Removes the engine's directory unless something is still mounted under it.
    fn remove_dir(&self) {
        let dir = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        if mounts.lines().any(|l| l.contains(&dir)) {
            eprintln!("verge-testkit: mounts left under {dir}; not removing it");
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for NetnsDocker {
    fn drop(&mut self) {
        if let Err(error) = self.shut_down() {
            eprintln!("verge-testkit: stopping dockerd: {error:#}");
        }
    }
}

/// `nsenter` and its arguments that run `dockerd` in `ns` with everything under `dir`
/// (created; emptied first).
fn dockerd_command(ns: &EdgeNetns, dir: &Path) -> anyhow::Result<(PathBuf, Vec<String>)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let dockerd = which("dockerd")?;
    // `nsenter --net`, not `ip netns exec`: the latter mounts a fresh /sys for the
    // namespace, which hides the cgroup hierarchy dockerd needs.
    let args = vec![
        format!("--net=/var/run/netns/{}", ns.name()),
        dockerd.display().to_string(),
        format!("--data-root={}", dir.join("data").display()),
        format!("--exec-root={}", dir.join("exec").display()),
        format!("--pidfile={}", dir.join("dockerd.pid").display()),
        format!("--host=unix://{}", dir.join("docker.sock").display()),
        format!("--cgroup-parent={}", ns.name()),
        "--bridge=none".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    Ok((PathBuf::from("nsenter"), args))
}

/// The path of `program` on `PATH`.
fn which(program: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .with_context(|| format!("{program} is not on PATH (Debian package docker.io)"))
}
