//! Starting Jaeger detached, the readiness wait, its `state.json`, and up/status/down.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::{BINARY, Jaeger, JaegerConfig, Ports};
use crate::daemon;
use crate::lock::FileLock;
use crate::process::log_tail;

/// The version of Jaeger's command line. A Jaeger whose `state.json` records another one
/// (an older kit's) is restarted by [`JaegerConfig::up`]. Bump it when a flag or the
/// environment changes. 2: `OTEL_TRACES_SAMPLER=always_off`.
const LAYOUT: u32 = 2;

/// `<state>/state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct State {
    version: String,
    binary: PathBuf,
    pid: u32,
    ports: Ports,
    layout: u32,
}

impl State {
    /// Reads `<dir>/state.json`; `None` when missing or unparsable.
    fn load(dir: &Path) -> Option<Self> {
        let bytes = std::fs::read(dir.join("state.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join("state.json");
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }
}

impl JaegerConfig {
    /// Starts Jaeger, or returns the one already running from
    /// [`JaegerConfig::state_dir`] if it is healthy (same version, binary, ports and command
    /// line; process alive; health check answering within 5 s). Builds first if needed
    /// ([`JaegerConfig::ensure_built`]).
    ///
    /// A fresh start stops a recorded but unhealthy Jaeger, checks that the
    /// [ports](JaegerConfig::ports) are free, starts `jaeger-all-in-one` detached with memory
    /// storage, every receiver and server bound on `127.0.0.1`, and waits until its health
    /// check and `/api/services` answer (about a second). Concurrent callers, in one or
    /// several processes, are serialized by `<state>/lock`.
    ///
    /// # Errors
    /// Build failure; a port is taken by another process (e.g. another OTLP collector); the
    /// process exits or is not ready within [`JaegerConfig::ready_timeout`] (the error holds
    /// its log tail; the process is stopped).
    pub async fn up(&self) -> anyhow::Result<Jaeger> {
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.ensure_built()).await??;
        std::fs::create_dir_all(&self.state_dir)
            .with_context(|| format!("creating {}", self.state_dir.display()))?;
        let _lock = FileLock::acquire_async(&self.state_dir.join("lock")).await?;
        if let Some(running) = self.status().await? {
            return Ok(running);
        }
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.stop_recorded()).await??;
        self.start().await
    }

    /// The running Jaeger of [`JaegerConfig::state_dir`] if it is healthy (see
    /// [`JaegerConfig::up`]). Takes no lock.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for checks that can fail.
    pub async fn status(&self) -> anyhow::Result<Option<Jaeger>> {
        let Some(state) = State::load(&self.state_dir) else {
            return Ok(None);
        };
        if state != self.expected_state(state.pid) || !daemon::is_alive(state.pid, Some(BINARY)) {
            return Ok(None);
        }
        let jaeger = self.handle(state.pid);
        let healthy = tokio::time::timeout(Duration::from_secs(5), jaeger.is_healthy()).await;
        Ok(matches!(healthy, Ok(true)).then_some(jaeger))
    }

    /// Stops the Jaeger of [`JaegerConfig::state_dir`] (SIGTERM, SIGKILL after 10 s) and
    /// removes its `state.json` (the log stays for inspection until the next start). Returns
    /// whether it was running. Blocks; waits for a concurrent [`JaegerConfig::up`] first.
    ///
    /// # Errors
    /// The process survives SIGKILL, or the state cannot be removed.
    pub fn down(&self) -> anyhow::Result<bool> {
        if !self.state_dir.exists() {
            return Ok(false);
        }
        let _lock = FileLock::acquire(&self.state_dir.join("lock"))?;
        self.stop_recorded()
    }

    /// Stops the recorded process, if alive, and removes `state.json` (lock held by caller).
    fn stop_recorded(&self) -> anyhow::Result<bool> {
        let pid = State::load(&self.state_dir)
            .map(|s| s.pid)
            .filter(|pid| daemon::is_alive(*pid, Some(BINARY)));
        if let Some(pid) = pid {
            let survivors = daemon::stop_all(&[pid], Duration::from_secs(10));
            if !survivors.is_empty() {
                bail!("jaeger-all-in-one (pid {pid}) survived SIGKILL");
            }
        }
        let state = self.state_dir.join("state.json");
        match std::fs::remove_file(&state) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", state.display())),
        }
        Ok(pid.is_some())
    }

    /// Fresh start (lock held, nothing recorded running).
    async fn start(&self) -> anyhow::Result<Jaeger> {
        let started = Instant::now();
        self.check_ports_free()?;
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        // Jaeger traces its own query service to localhost:4317, that is to itself; the
        // OpenTelemetry SDK's standard variable turns that off, so only Verge's spans show.
        let envs = [("OTEL_TRACES_SAMPLER", "always_off")];
        let pid = daemon::spawn_detached(&self.binary(), &self.args(), &envs, &log)?;
        self.expected_state(pid).save(&self.state_dir)?;
        let jaeger = self.handle(pid);
        match self.wait_ready(&jaeger).await {
            Ok(()) => {
                tracing::info!(elapsed = ?started.elapsed(), pid, "jaeger ready");
                Ok(jaeger)
            }
            Err(error) => {
                daemon::stop_all(&[pid], Duration::from_secs(5));
                Err(error.context(format!(
                    "starting Jaeger (log {}):\n{}",
                    log.display(),
                    log_tail(&log, 30)
                )))
            }
        }
    }

    /// Polls the health check and `/api/services` until both answer, the process exits, or
    /// [`JaegerConfig::ready_timeout`] passes.
    async fn wait_ready(&self, jaeger: &Jaeger) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            if !daemon::is_alive(jaeger.pid(), Some(BINARY)) {
                bail!(
                    "jaeger-all-in-one exited: {}",
                    daemon::describe_exit(jaeger.pid())
                );
            }
            if jaeger.is_healthy().await && jaeger.services().await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("Jaeger not ready after {:?}", self.ready_timeout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails naming the first of [`JaegerConfig::ports`] something listens on.
    fn check_ports_free(&self) -> anyhow::Result<()> {
        let p = self.ports;
        for (name, port) in [
            ("OTLP gRPC", p.otlp_grpc),
            ("OTLP HTTP", p.otlp_http),
            ("query HTTP", p.query_http),
            ("query gRPC", p.query_grpc),
            ("collector gRPC", p.collector_grpc),
            ("collector HTTP", p.collector_http),
            ("admin", p.admin),
        ] {
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).with_context(|| {
                format!(
                    "Jaeger's {name} port 127.0.0.1:{port} is taken by another process \
                     (another Jaeger or OTLP collector?)"
                )
            })?;
        }
        Ok(())
    }

    /// The all-in-one's flags: memory storage, everything on loopback.
    fn args(&self) -> Vec<String> {
        let p = self.ports;
        let at = |port: u16| format!("127.0.0.1:{port}");
        vec![
            format!("--memory.max-traces={}", self.max_traces),
            "--collector.otlp.enabled=true".to_owned(),
            format!("--collector.otlp.grpc.host-port={}", at(p.otlp_grpc)),
            format!("--collector.otlp.http.host-port={}", at(p.otlp_http)),
            format!("--collector.grpc-server.host-port={}", at(p.collector_grpc)),
            format!("--collector.http-server.host-port={}", at(p.collector_http)),
            format!("--query.http-server.host-port={}", at(p.query_http)),
            format!("--query.grpc-server.host-port={}", at(p.query_grpc)),
            format!("--admin.http.host-port={}", at(p.admin)),
            "--log-level=info".to_owned(),
        ]
    }

    fn expected_state(&self, pid: u32) -> State {
        State {
            version: self.version.clone(),
            binary: self.binary(),
            pid,
            ports: self.ports,
            layout: LAYOUT,
        }
    }

    fn handle(&self, pid: u32) -> Jaeger {
        Jaeger::new(self.version.clone(), pid, self.ports, self.log_path())
    }
}
