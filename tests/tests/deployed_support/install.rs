//! An edge node installed the way docs/install.md tells an operator to: the configuration is
//! `deploy/edge/edgecore.yaml` with the operator's edits (node name, cloudhub address), the
//! node joins once with `edgecore join` and a bootstrap token, and the agent runs with the
//! `ExecStart=` command line of `deploy/edge/edgecore.service`, with the test's paths in place of
//! `/usr/local/bin/edgecore` and `/etc/verge/edgecore.yaml`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use verge_e2e::Config;
use verge_testkit::process::{ChildProcess, workspace_bin};

/// Where the unit and docs/install.md put the binary and the configuration.
const INSTALLED_BIN: &str = "/usr/local/bin/edgecore";
const INSTALLED_CONFIG: &str = "/etc/verge/edgecore.yaml";

/// `deploy/edge/<file>`.
fn deploy_edge(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/edge")
        .join(file)
}

/// One installed edgecore: its directory (configuration and data) and, once started, the
/// process the unit's command line runs.
#[derive(Debug)]
pub struct InstalledEdge {
    /// The node name.
    pub name: String,
    config: PathBuf,
    /// Holds the configuration and the data directory; removed on drop.
    _dir: tempfile::TempDir,
    /// The agent, once [`InstalledEdge::start`] ran.
    pub process: Option<ChildProcess>,
}

impl InstalledEdge {
    /// Writes `deploy/edge/edgecore.yaml` with the edits an operator makes: `name`, cloudhub
    /// reached at `cloudhub` (the Service's cluster IP) on 10000 and 10002; the data directory
    /// and DMI socket are moved into a temporary directory and the sandbox image is the kit's
    /// locally built pause image (no registry can be reached).
    ///
    /// # Errors
    /// The example does not parse, or the file cannot be written.
    pub fn configure(name: &str, cloudhub: IpAddr) -> anyhow::Result<Self> {
        let mut config = Config::load(&deploy_edge("edgecore.yaml"))?;
        let dir = tempfile::tempdir()?;
        config.node_name = name.to_owned();
        config.data_dir = dir.path().join("data");
        config.edge_hub.server = format!("https://{cloudhub}:10000");
        config.edge_hub.join_server = Some(format!("https://{cloudhub}:10002"));
        config.edged.pod_sandbox_image = verge_testkit::kubelet_node::PAUSE_IMAGE.to_owned();
        config.edged.node_status_update_frequency = std::time::Duration::from_secs(2);
        config.device_twin.dmi_socket = dir.path().join("dmi.sock");
        // Tests run edges side by side: a free port instead of the default 10008.
        config.metrics_addr = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let path = dir.path().join("edgecore.yaml");
        std::fs::write(&path, config.to_yaml()?)?;
        Ok(Self {
            name: name.to_owned(),
            config: path,
            _dir: dir,
            process: None,
        })
    }

    /// `edgecore --config <config> join --cloudhub <join server> --tls-server-name
    /// cloudhub.verge-system.svc --token <token>` (docs/install.md, step 3); returns its output.
    ///
    /// # Errors
    /// The join fails (the error holds edgecore's output).
    pub fn join(&self, cloudhub: IpAddr, token: &str) -> anyhow::Result<String> {
        let out = std::process::Command::new(workspace_bin("edgecore")?)
            .arg("--config")
            .arg(&self.config)
            .args([
                "join",
                "--cloudhub",
                &format!("{cloudhub}:10002"),
                "--tls-server-name",
                "cloudhub.verge-system.svc",
                "--token",
                token,
            ])
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "edgecore join failed: {text}");
        Ok(text)
    }

    /// Starts the agent with the unit's `ExecStart=` command line.
    ///
    /// # Errors
    /// The unit has no usable `ExecStart=`, or the binary cannot be started.
    pub fn start(&mut self) -> anyhow::Result<()> {
        let args = exec_start(&workspace_bin("edgecore")?, &self.config)?;
        let (program, args) = args.split_first().context("empty ExecStart")?;
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

/// The unit's `ExecStart=` split into words, with `bin` and `config` in place of the
/// installed paths.
fn exec_start(bin: &Path, config: &Path) -> anyhow::Result<Vec<String>> {
    let unit = std::fs::read_to_string(deploy_edge("edgecore.service"))?;
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .context("deploy/edge/edgecore.service has no ExecStart=")?;
    Ok(line
        .split_whitespace()
        .map(|w| match w {
            INSTALLED_BIN => bin.display().to_string(),
            INSTALLED_CONFIG => config.display().to_string(),
            other => other.to_owned(),
        })
        .collect())
}
