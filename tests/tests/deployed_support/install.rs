//! An edge node installed the way docs/install.md tells an operator to
//! ([`verge_testkit::edge_install::EdgeInstall`]), its agent run by the test: killed, and its
//! containers removed, when the test drops it.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;

use verge_testkit::edge_install::EdgeInstall;
use verge_testkit::process::{ChildProcess, workspace_bin};

/// One installed edgecore: its directory (configuration and data) and, once started, the
/// process the unit's command line runs.
#[derive(Debug)]
pub struct InstalledEdge {
    /// The node name.
    pub name: String,
    install: EdgeInstall,
    /// Holds the configuration and the data directory; removed on drop.
    _dir: tempfile::TempDir,
    /// The agent, once [`InstalledEdge::start`] ran.
    pub process: Option<ChildProcess>,
}

impl InstalledEdge {
    /// [`EdgeInstall::configure`] into a temporary directory, node status every 2 s.
    ///
    /// # Errors
    /// As [`EdgeInstall::configure`].
    pub fn configure(name: &str, cloudhub: IpAddr) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let install =
            EdgeInstall::configure(dir.path(), name, cloudhub, Some(Duration::from_secs(2)))?;
        Ok(Self {
            name: name.to_owned(),
            install,
            _dir: dir,
            process: None,
        })
    }

    /// `edgecore join` through `cloudhub` with `token`, the Verge CA pinned to
    /// `ca_cert_hash` ([`EdgeInstall::join`]).
    ///
    /// # Errors
    /// The join fails (the error holds edgecore's output).
    pub fn join(
        &self,
        cloudhub: IpAddr,
        token: &str,
        ca_cert_hash: &str,
    ) -> anyhow::Result<String> {
        self.install
            .join(&workspace_bin("edgecore")?, cloudhub, token, ca_cert_hash)
    }

    /// Starts the agent with the unit's `ExecStart=` command line.
    ///
    /// # Errors
    /// The unit has no usable `ExecStart=`, or the binary cannot be started.
    pub fn start(&mut self) -> anyhow::Result<()> {
        let argv = self.install.command_line(&workspace_bin("edgecore")?)?;
        let (program, args) = argv.split_first().context("empty ExecStart")?;
        self.process = Some(ChildProcess::spawn(program, args, [("RUST_LOG", "info")])?);
        Ok(())
    }

    /// The last `n` lines of the agent's log.
    pub fn logs(&self, n: usize) -> String {
        self.process
            .as_ref()
            .map_or_else(String::new, |p| p.log_tail(n))
    }
}

impl Drop for InstalledEdge {
    /// Stops edgecore (SIGKILL) and removes the containers it made (label
    /// `io.verge.managed=<node>`): stopping edgecore alone leaves pods running, on purpose.
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.kill9();
        }
        let _ = verge_e2e::remove_managed_containers(|n| n == self.name);
    }
}
