//! An edge node installed the way docs/install.md tells an operator to: the configuration is
//! `deploy/edge/edgecore.yaml` with the operator's edits (node name, cloudhub address), the
//! node joins once with `edgecore join` and a bootstrap token, and the agent runs with the
//! `ExecStart=` command line of `deploy/edge/edgecore.service`, with the caller's paths in
//! place of `/usr/local/bin/edgecore` and `/etc/verge/edgecore.yaml`.
//!
//! [`EdgeInstall`] writes the files and runs the join; how the agent's process is kept (a
//! [`crate::process::ChildProcess`] in a test, a detached daemon in `cargo xtask quickstart
//! --deployed`) is the caller's choice: [`EdgeInstall::command_line`] gives its argv.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde_norway::{Mapping, Value};

/// Where the unit and docs/install.md put the binary.
const INSTALLED_BIN: &str = "/usr/local/bin/edgecore";

/// Where the unit and docs/install.md put the configuration.
const INSTALLED_CONFIG: &str = "/etc/verge/edgecore.yaml";

/// The name cloudhub's serving certificate carries (the Service's DNS name); the example
/// configuration's `edgeHub.tlsServerName`.
pub const CLOUDHUB_TLS_NAME: &str = "cloudhub.verge-system.svc";

/// cloudhub's EdgeHub port (mutual TLS).
pub const EDGE_PORT: u16 = 10000;

/// cloudhub's Join port.
pub const JOIN_PORT: u16 = 10002;

/// `deploy/edge/<file>`.
pub fn deploy_edge(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/edge")
        .join(file)
}

/// One edge installed into a directory of its own: `<dir>/edgecore.yaml`, the data
/// directory `<dir>/data` and the DMI socket `<dir>/dmi.sock`.
#[derive(Debug, Clone)]
pub struct EdgeInstall {
    /// The node name.
    pub name: String,
    /// The installation directory.
    pub dir: PathBuf,
    /// `<dir>/edgecore.yaml`.
    pub config: PathBuf,
}

impl EdgeInstall {
    /// Writes `deploy/edge/edgecore.yaml` into `dir` (created if missing) with the edits an
    /// operator makes: node `name`, cloudhub reached at `cloudhub` (e.g. the Service's
    /// cluster IP, from a host running kube-proxy) on [`EDGE_PORT`] and [`JOIN_PORT`]. The
    /// data directory and the DMI socket move into `dir`, and the sandbox image is the kit's
    /// locally built pause image [`crate::kubelet_node::PAUSE_IMAGE`] (no registry can be
    /// reached), and `/metrics` is served on a free loopback port (`metricsAddr: 127.0.0.1:0`).
    /// `status_every`, when set, is `edged.nodeStatusUpdateFrequency` (tests shorten
    /// the 10 s default), and four times it (whole seconds, at least 1) is
    /// `edged.nodeLeaseDurationSeconds`, so that edgecontroller renews the node's Lease every
    /// `status_every` (a quarter of the duration): the kit's 10 s node-monitor-grace-period
    /// would not keep a node Ready on the default 40 s Lease's 10 s renewals.
    ///
    /// # Errors
    /// The example does not parse as a YAML mapping, or a file cannot be written.
    pub fn configure(
        dir: &Path,
        name: &str,
        cloudhub: IpAddr,
        status_every: Option<Duration>,
    ) -> anyhow::Result<Self> {
        let example = deploy_edge("edgecore.yaml");
        let text = std::fs::read_to_string(&example)
            .with_context(|| format!("reading {}", example.display()))?;
        let mut config: Value = serde_norway::from_str(&text)
            .with_context(|| format!("parsing {}", example.display()))?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let host = match cloudhub {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let path = |p: &Path| Value::String(p.display().to_string());
        set(&mut config, &["nodeName"], name.into())?;
        set(&mut config, &["dataDir"], path(&dir.join("data")))?;
        set(
            &mut config,
            &["edgeHub", "server"],
            format!("https://{host}:{EDGE_PORT}").into(),
        )?;
        set(
            &mut config,
            &["edgeHub", "joinServer"],
            format!("https://{host}:{JOIN_PORT}").into(),
        )?;
        set(
            &mut config,
            &["edged", "podSandboxImage"],
            crate::kubelet_node::PAUSE_IMAGE.into(),
        )?;
        if let Some(every) = status_every {
            set(
                &mut config,
                &["edged", "nodeStatusUpdateFrequency"],
                format!("{}ms", every.as_millis()).into(),
            )?;
            let lease_seconds = (every * 4).as_millis().div_ceil(1000).max(1);
            set(
                &mut config,
                &["edged", "nodeLeaseDurationSeconds"],
                Value::from(u64::try_from(lease_seconds).unwrap_or(u64::MAX)),
            )?;
        }
        set(
            &mut config,
            &["deviceTwin", "dmiSocket"],
            path(&dir.join("dmi.sock")),
        )?;
        // This host's Docker holds the kit's and other tests' images: no image GC here.
        set(
            &mut config,
            &["edged", "gc", "imageGCHighThresholdPercent"],
            100.into(),
        )?;
        // Several installed edges run side by side on one host (the tests' three, the
        // quickstart's): each serves /metrics on a free loopback port, not the default one.
        set(&mut config, &["metricsAddr"], "127.0.0.1:0".into())?;
        let file = dir.join("edgecore.yaml");
        std::fs::write(&file, serde_norway::to_string(&config)?)
            .with_context(|| format!("writing {}", file.display()))?;
        Ok(Self {
            name: name.to_owned(),
            dir: dir.to_owned(),
            config: file,
        })
    }

    /// `<bin> --config <config> join --cloudhub <cloudhub>:10002 --tls-server-name
    /// cloudhub.verge-system.svc --token <token> --ca-cert-hash <ca_cert_hash>`
    /// (docs/install.md, step 3: the Verge CA pinned, e.g. with
    /// [`crate::trust::verge_ca_hash`]); returns its output (stdout, then stderr).
    ///
    /// # Errors
    /// The join fails (the error holds edgecore's output).
    pub fn join(
        &self,
        bin: &Path,
        cloudhub: IpAddr,
        token: &str,
        ca_cert_hash: &str,
    ) -> anyhow::Result<String> {
        let out = Command::new(bin)
            .arg("--config")
            .arg(&self.config)
            .args([
                "join",
                "--cloudhub",
                &std::net::SocketAddr::new(cloudhub, JOIN_PORT).to_string(),
                "--tls-server-name",
                CLOUDHUB_TLS_NAME,
                "--token",
                token,
                "--ca-cert-hash",
                ca_cert_hash,
            ])
            .output()
            .with_context(|| format!("running {} join", bin.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "edgecore join failed: {text}");
        Ok(text)
    }

    /// The unit's `ExecStart=` split into words, with `bin` and this installation's
    /// configuration in place of the installed paths: the agent's argv (program first).
    ///
    /// # Errors
    /// `deploy/edge/edgecore.service` cannot be read or has no `ExecStart=`.
    pub fn command_line(&self, bin: &Path) -> anyhow::Result<Vec<String>> {
        let unit_path = deploy_edge("edgecore.service");
        let unit = std::fs::read_to_string(&unit_path)
            .with_context(|| format!("reading {}", unit_path.display()))?;
        exec_start(&unit, bin, &self.config)
    }
}

/// The `ExecStart=` of `unit` split into words, with `bin` and `config` in place of the
/// installed paths.
fn exec_start(unit: &str, bin: &Path, config: &Path) -> anyhow::Result<Vec<String>> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .context("deploy/edge/edgecore.service has no ExecStart=")?;
    let words: Vec<String> = line
        .split_whitespace()
        .map(|w| match w {
            INSTALLED_BIN => bin.display().to_string(),
            INSTALLED_CONFIG => config.display().to_string(),
            other => other.to_owned(),
        })
        .collect();
    ensure!(!words.is_empty(), "empty ExecStart= in the unit");
    Ok(words)
}

/// Sets `path` (mapping keys from the root) in `config` to `value`, creating missing
/// mappings on the way.
fn set(config: &mut Value, path: &[&str], value: Value) -> anyhow::Result<()> {
    let Some((last, parents)) = path.split_last() else {
        bail!("empty configuration path");
    };
    let mut node = config;
    for key in parents {
        let Value::Mapping(map) = node else {
            bail!("{} is not a mapping in edgecore.yaml", path.join("."));
        };
        node = map
            .entry(Value::String((*key).to_owned()))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
    let Value::Mapping(map) = node else {
        bail!("{} is not a mapping in edgecore.yaml", path.join("."));
    };
    map.insert(Value::String((*last).to_owned()), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configure_edits_the_example_as_an_operator_would() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let edge = EdgeInstall::configure(
            dir.path(),
            "edge-7",
            "10.96.0.10".parse()?,
            Some(Duration::from_secs(2)),
        )?;
        let config: Value = serde_norway::from_str(&std::fs::read_to_string(&edge.config)?)?;
        assert_eq!(config["nodeName"], Value::from("edge-7"));
        assert_eq!(
            config["edgeHub"]["server"],
            Value::from("https://10.96.0.10:10000")
        );
        assert_eq!(
            config["edgeHub"]["joinServer"],
            Value::from("https://10.96.0.10:10002")
        );
        assert_eq!(
            config["edgeHub"]["tlsServerName"],
            Value::from(CLOUDHUB_TLS_NAME)
        );
        assert_eq!(
            config["edged"]["nodeStatusUpdateFrequency"],
            Value::from("2000ms")
        );
        assert_eq!(config["edged"]["nodeLeaseDurationSeconds"], Value::from(8));
        assert_eq!(
            config["dataDir"],
            Value::from(dir.path().join("data").display().to_string())
        );
        Ok(())
    }

    #[test]
    fn the_units_command_line_names_the_given_paths() -> anyhow::Result<()> {
        let unit =
            "[Service]\nExecStart=/usr/local/bin/edgecore --config /etc/verge/edgecore.yaml\n";
        let argv = exec_start(unit, Path::new("/b/edgecore"), Path::new("/c/e.yaml"))?;
        assert_eq!(argv, ["/b/edgecore", "--config", "/c/e.yaml"]);
        assert!(exec_start("[Service]\n", Path::new("b"), Path::new("c")).is_err());
        let dir = tempfile::tempdir()?;
        let edge = EdgeInstall::configure(dir.path(), "e", "127.0.0.1".parse()?, None)?;
        let argv = edge.command_line(Path::new("/b/edgecore"))?;
        assert_eq!(argv.first().map(String::as_str), Some("/b/edgecore"));
        assert!(argv.contains(&edge.config.display().to_string()));
        Ok(())
    }
}
