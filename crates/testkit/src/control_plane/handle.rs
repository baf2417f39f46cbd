//! [`ControlPlane`]: the handle of a running control plane.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::ControlPlaneConfig;
use super::state::{Component, State};
use crate::daemon;

/// A running control plane (cheap to clone; holds paths and credentials, no
/// connections, so it may be used from any Tokio runtime).
#[derive(Debug, Clone)]
pub struct ControlPlane {
    pub(super) version: String,
    pub(super) state_dir: PathBuf,
    pub(super) bin_dir: PathBuf,
    pub(super) server: String,
    pub(super) admin_token: String,
    pub(super) components: Vec<Component>,
    pub(super) advertise_address: Ipv4Addr,
    pub(super) apiserver_port: u16,
    pub(super) streams_front_port: u16,
}

impl ControlPlane {
    pub(super) fn from_state(config: &ControlPlaneConfig, state: State) -> Self {
        Self {
            version: state.version,
            state_dir: config.state_dir.clone(),
            bin_dir: state.bin_dir,
            server: state.server,
            admin_token: state.admin_token,
            components: state.components,
            apiserver_port: state.ports.apiserver,
            streams_front_port: state.ports.streams_front,
            advertise_address: state.advertise_address.unwrap_or(config.advertise_address),
        }
    }

    /// The port of the streams front (127.0.0.1), kube-apiserver's egress proxy: a
    /// cloudhub without sessions that forwards kubelet connections to the replica holding
    /// an edge node's session, and dials other nodes directly.
    pub fn streams_front_port(&self) -> u16 {
        self.streams_front_port
    }

    /// kube-apiserver's `--advertise-address` (on the link
    /// [`super::ADVERTISE_LINK`]): the endpoint address of the `kubernetes` Service. The
    /// API server listens on all addresses, so `https://<this>:<port>` reaches it too.
    pub fn advertise_address(&self) -> Ipv4Addr {
        self.advertise_address
    }

    /// The API server's port (the port of [`ControlPlane::server_url`]).
    pub fn apiserver_port(&self) -> u16 {
        self.apiserver_port
    }

    /// Kubernetes release without the `v`, e.g. `"1.37.1"`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The API server URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// The admin bearer token (user `admin`, group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The state directory (layout in the [module docs](super)).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// `<state>/kubeconfig`: admin credentials, for kubectl (`KUBECONFIG`) and kube-rs.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }

    /// `<state>/env`: shell `export` lines (`KUBECONFIG`, `VERGE_STATE_DIR`, ...).
    pub fn env_file(&self) -> PathBuf {
        self.state_dir.join("env")
    }

    /// The cluster CA certificate (PEM), `<state>/pki/ca.crt`.
    pub fn ca_cert_path(&self) -> PathBuf {
        self.state_dir.join("pki/ca.crt")
    }

    /// The cluster CA private key (PKCS#8 PEM, ECDSA P-256), `<state>/pki/ca.key`;
    /// also the controller-manager's CSR signing key.
    pub fn ca_key_path(&self) -> PathBuf {
        self.state_dir.join("pki/ca.key")
    }

    /// Directory of the control-plane binaries (etcd, kube-*, kubectl).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// `<bin>/kubectl`.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// A `kubectl` command with `KUBECONFIG` set to [`ControlPlane::kubeconfig`].
    pub fn kubectl_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(self.kubectl());
        cmd.env("KUBECONFIG", self.kubeconfig());
        cmd
    }

    /// Runs [`ControlPlane::kubectl_command`] with `args`, `input` on its stdin (e.g.
    /// `kubectl apply -f -` of a manifest), and returns its output, whatever its status.
    ///
    /// # Errors
    /// kubectl cannot be started or its stdin written.
    pub fn kubectl_with_input(
        &self,
        args: &[&str],
        input: &str,
    ) -> std::io::Result<std::process::Output> {
        use std::io::Write as _;
        use std::process::Stdio;
        let mut child = self
            .kubectl_command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes())?;
        }
        child.wait_with_output()
    }

    /// `<state>/logs/<component>.log`, e.g. `log_path("kube-apiserver")`.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.state_dir.join("logs").join(format!("{component}.log"))
    }

    /// `(component name, pid)` of each running component, in start order.
    pub fn pids(&self) -> Vec<(&str, u32)> {
        self.components
            .iter()
            .map(|c| (c.name.as_str(), c.pid))
            .collect()
    }

    /// `kill -9` component `name` (e.g. `"kube-apiserver"`) and start it again with the same
    /// command line (read from `/proc/<pid>/cmdline`) and log file, as a crash and a
    /// supervisor restart would. Updates the recorded pid (`state.json`, `pids/`) and this
    /// handle; does not wait for readiness. Use it on a control plane of the test's own
    /// (not [`crate::shared`]): other tests would see the outage.
    ///
    /// # Errors
    /// Unknown component, unreadable command line, or the restart fails.
    pub fn restart_component(&mut self, name: &str) -> anyhow::Result<u32> {
        let c = self
            .components
            .iter_mut()
            .find(|c| c.name == name)
            .with_context(|| format!("no component {name}"))?;
        let raw = std::fs::read(format!("/proc/{}/cmdline", c.pid))
            .with_context(|| format!("reading the command line of {name} (pid {})", c.pid))?;
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .skip(1)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        daemon::signal_group(c.pid, "KILL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while daemon::is_alive(c.pid, Some(name)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = self.state_dir.join("logs").join(format!("{name}.log"));
        // The old process's ports can stay taken for a moment after it died; a restart that
        // loses that race exits at once with "address already in use". Wait for the ports,
        // and start again if the new process dies within its first second.
        let ports = listen_ports(&args);
        let mut attempt = 0;
        let pid = loop {
            attempt += 1;
            wait_bindable(&ports, Duration::from_secs(10));
            let pid = daemon::spawn_detached(&self.bin_dir.join(name), &args, &[], &log)?;
            std::thread::sleep(Duration::from_secs(1));
            if daemon::is_alive(pid, Some(name)) || attempt >= 5 {
                break pid;
            }
            tracing::warn!(
                name,
                attempt,
                "restarted component exited at once; starting it again"
            );
        };
        c.pid = pid;
        std::fs::write(
            self.state_dir.join("pids").join(format!("{name}.pid")),
            format!("{pid}\n"),
        )?;
        if let Some(mut state) = State::load(&self.state_dir) {
            if let Some(sc) = state.components.iter_mut().find(|sc| sc.name == name) {
                sc.pid = pid;
            }
            state.save(&self.state_dir)?;
        }
        Ok(pid)
    }

    /// The shell lines of the env file: `export NAME='value'` each.
    pub fn env_lines(&self) -> Vec<String> {
        let kv = [
            ("KUBECONFIG", self.kubeconfig().display().to_string()),
            ("VERGE_STATE_DIR", self.state_dir.display().to_string()),
            ("VERGE_KUBE_SERVER", self.server.clone()),
            ("VERGE_KUBE_TOKEN", self.admin_token.clone()),
            ("VERGE_KUBE_BIN_DIR", self.bin_dir.display().to_string()),
        ];
        kv.iter()
            .map(|(k, v)| format!("export {k}='{v}'"))
            .collect()
    }

    /// A new kube-rs client with admin credentials, built from
    /// [`ControlPlane::kubeconfig`]. Create one per Tokio runtime (per test).
    ///
    /// # Errors
    /// The kubeconfig cannot be read or turned into a client configuration.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let path = self.kubeconfig();
        let kubeconfig = Kubeconfig::read_from(&path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?;
        kube::Client::try_from(config).context("building kube client")
    }

    /// A new kube-rs client that acts as `user` (admin credentials with
    /// `Impersonate-User`), e.g. `system:serviceaccount:verge-system:devicecontroller`, so
    /// that a test runs a component with exactly the permissions its RBAC grants.
    ///
    /// # Errors
    /// As [`ControlPlane::client`].
    pub async fn client_as(&self, user: &str) -> anyhow::Result<kube::Client> {
        let path = self.kubeconfig();
        let kubeconfig = Kubeconfig::read_from(&path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?;
        config.auth_info.impersonate = Some(user.to_owned());
        kube::Client::try_from(config).context("building kube client")
    }
}

/// The local ports a component's flags make it listen on: `--secure-port=<n>` and the port
/// of every `--listen-*-urls=<scheme>://<host>:<n>`.
fn listen_ports(args: &[String]) -> Vec<u16> {
    args.iter()
        .filter_map(|a| {
            let value = a.strip_prefix("--secure-port=").or_else(|| {
                a.strip_prefix("--listen-")
                    .and_then(|r| r.split_once("urls=").map(|(_, v)| v))
            })?;
            value.rsplit(':').next()?.parse().ok()
        })
        .collect()
}

/// Waits (at most `limit`) until every port of `ports` can be bound on 127.0.0.1.
fn wait_bindable(ports: &[u16], limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline
        && ports
            .iter()
            .any(|p| std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, *p)).is_err())
    {
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_ports_from_flags() {
        let args: Vec<String> = [
            "--secure-port=21056",
            "--listen-client-urls=https://127.0.0.1:2379",
            "--advertise-client-urls=https://127.0.0.1:2379",
            "--v=2",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(listen_ports(&args), [21056, 2379]);
    }
}
