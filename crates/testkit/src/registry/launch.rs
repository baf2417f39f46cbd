//! Starting one registry instance, its readiness wait, and Docker's trust of its CA.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;

use super::files::{write_config, write_credentials};
use super::{Registry, RegistryConfig};
use crate::ports::free_port;
use crate::process::ChildProcess;

/// Where the Docker engine looks for per-registry CAs: `<dir>/<host>:<port>/ca.crt`, read on
/// every pull and push (no daemon restart). A daemon-wide default, so the engines of
/// [`crate::netns_docker`] read it too.
pub const DOCKER_CERTS_DIR: &str = "/etc/docker/certs.d";

impl RegistryConfig {
    /// Starts a registry on `ip` at a free port ([`crate::ports::free_port`]): builds first if
    /// needed ([`RegistryConfig::ensure_built`]), writes its files into a fresh temporary
    /// directory (layout in the [module docs](super)), starts `registry serve config.yml` as
    /// a child process and waits until it logs that it listens (well under a second once
    /// built), then writes the CA to [`DOCKER_CERTS_DIR`]`/<ip>:<port>/ca.crt`. A port
    /// taken between the pick and the bind is retried with another, twice.
    ///
    /// `ip` must be an address of this host (or of the network namespace the caller runs
    /// in): `127.0.0.1`, or e.g. the host side of a namespace's veth.
    ///
    /// # Errors
    /// Build failure; a file cannot be written (also `/etc/docker/certs.d` when not root);
    /// the registry exits or does not listen within [`RegistryConfig::ready_timeout`] (the
    /// error holds its log tail).
    pub async fn start_on(&self, ip: Ipv4Addr) -> anyhow::Result<Registry> {
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.ensure_built()).await??;
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("verge-registry-")
            .tempdir()
            .context("creating the registry's directory")?;
        let credentials = write_credentials(dir.path(), ip)?;
        let mut last_error = None;
        for _ in 0..3 {
            let addr = SocketAddrV4::new(ip, free_port()?);
            match self.spawn(dir.path(), addr).await {
                Ok(process) => {
                    let trust = DockerTrust::install(addr, &credentials.ca_pem)?;
                    tracing::info!(%addr, pid = process.pid(), elapsed = ?started.elapsed(), "registry ready");
                    return Ok(Registry {
                        process,
                        _trust: trust,
                        addr,
                        version: self.version.clone(),
                        ca_pem: credentials.ca_pem,
                        password: credentials.password,
                        dir,
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("the registry did not start")))
    }

    /// Writes `config.yml` for `addr` and starts the registry, waiting for its
    /// `listening on` line.
    async fn spawn(&self, dir: &Path, addr: SocketAddrV4) -> anyhow::Result<ChildProcess> {
        let config = write_config(dir, addr)?;
        // Its OpenTelemetry exporter would send spans to a local OTLP collector (the kit's
        // Jaeger, when one runs): off.
        let mut process = ChildProcess::spawn(
            self.binary(),
            [Path::new("serve"), &config],
            [("OTEL_TRACES_EXPORTER", "none")],
        )?;
        process
            .wait_for_log("listening on", self.ready_timeout)
            .await
            .with_context(|| format!("starting the registry on {addr}"))?;
        Ok(process)
    }
}

/// `/etc/docker/certs.d/<ip>:<port>/` holding the instance's CA; removed on drop.
#[derive(Debug)]
pub(super) struct DockerTrust {
    dir: PathBuf,
}

impl DockerTrust {
    /// Writes `ca_pem` to [`DOCKER_CERTS_DIR`]`/<addr>/ca.crt`, replacing a stale one left by
    /// a killed test at the same address.
    fn install(addr: SocketAddrV4, ca_pem: &str) -> anyhow::Result<Self> {
        let dir = Path::new(DOCKER_CERTS_DIR).join(addr.to_string());
        std::fs::create_dir_all(&dir).with_context(|| {
            format!(
                "creating {} (Docker's trust of the test registry's CA; needs root)",
                dir.display()
            )
        })?;
        let guard = Self { dir };
        let file = guard.dir.join("ca.crt");
        std::fs::write(&file, ca_pem).with_context(|| format!("writing {}", file.display()))?;
        Ok(guard)
    }
}

impl Drop for DockerTrust {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, dir = %self.dir.display(), "removing the registry's Docker CA");
        }
    }
}
