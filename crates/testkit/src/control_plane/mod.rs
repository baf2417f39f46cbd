//! A real Kubernetes control plane for tests: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of one pinned release.
//!
//! [`ControlPlaneConfig::ensure_built`] builds the binaries once into a cache outside
//! the repository; [`ControlPlaneConfig::up`] starts them as detached processes that
//! outlive the caller (so every test binary of a run shares one control plane) and
//! returns a [`ControlPlane`] handle; [`ControlPlaneConfig::down`] stops them.
//!
//! # State directory
//!
//! ```text
//! <state>/lock            flock serializing up/down across processes
//! <state>/state.json      version, server URL, ports, admin token, component pids
//! <state>/kubeconfig      admin kubeconfig (token auth, embedded CA) for kubectl/kube-rs
//! <state>/env             `export KUBECONFIG=...` and friends, for `eval`/`source`
//! <state>/tokens.csv      kube-apiserver --token-auth-file
//! <state>/pki/            ca.crt ca.key apiserver.crt apiserver.key sa.key sa.pub
//! <state>/etcd/           etcd data directory
//! <state>/certs/          --cert-dir of controller-manager and scheduler
//! <state>/logs/<c>.log    stdout+stderr of each component
//! <state>/pids/<c>.pid    pid of each component (also in state.json)
//! ```

mod build;
mod certs;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::{Deserialize, Serialize};

pub use build::build_script;
pub use certs::APISERVER_SANS;

use crate::daemon;
use crate::lock::FileLock;
use crate::paths;

/// The pinned Kubernetes release: the newest minor that both `k8s-openapi` 0.29
/// (feature `v1_37`) and the Go module proxy support.
pub const K8S_VERSION: &str = "1.37.1";

/// The service CIDR (`--service-cluster-ip-range`); the `kubernetes` service gets its
/// first address, `10.96.0.1`.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The components, in start order (also their binary, log and pid file names).
const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// Binaries in the cache's `bin/` directory.
pub(crate) const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// Where and how to build and run a control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneConfig {
    /// Kubernetes release without the `v`, e.g. `"1.37.1"`.
    pub version: String,
    /// Build cache: `bin/` with the binaries and the `complete` stamp.
    /// Default `$VERGE_CACHE_DIR`, else `~/.cache/verge/control-plane/v<version>`.
    pub cache_dir: PathBuf,
    /// State directory (layout in the [module docs](self)).
    /// Default `$VERGE_STATE_DIR`, else `~/.cache/verge/run/control-plane`.
    pub state_dir: PathBuf,
    /// kube-controller-manager `--node-monitor-grace-period`: how long a Node may go
    /// without a heartbeat before it is marked `Ready=Unknown`. Default 10 s (upstream
    /// 50 s) so node-loss tests are quick.
    pub node_monitor_grace_period: Duration,
    /// kube-controller-manager `--node-monitor-period`: how often node health is
    /// checked. Default 2 s (upstream 5 s).
    pub node_monitor_period: Duration,
    /// How long [`ControlPlaneConfig::up`] waits for `/readyz` and the `default`
    /// service account. Default 120 s.
    pub ready_timeout: Duration,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

impl ControlPlaneConfig {
    /// The configuration for [`K8S_VERSION`] with directories from `$VERGE_CACHE_DIR`
    /// and `$VERGE_STATE_DIR` (unset or empty: the defaults documented on the fields).
    pub fn from_env() -> Self {
        let env_dir = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let version = K8S_VERSION.to_owned();
        Self {
            cache_dir: env_dir("VERGE_CACHE_DIR").unwrap_or_else(|| {
                paths::verge_home()
                    .join("control-plane")
                    .join(format!("v{version}"))
            }),
            state_dir: env_dir("VERGE_STATE_DIR")
                .unwrap_or_else(|| paths::run_dir().join("control-plane")),
            version,
            node_monitor_grace_period: Duration::from_secs(10),
            node_monitor_period: Duration::from_secs(2),
            ready_timeout: Duration::from_secs(120),
        }
    }

    /// `<cache-dir>/bin`.
    pub fn bin_dir(&self) -> PathBuf {
        self.cache_dir.join("bin")
    }

    /// `<cache-dir>/bin/kubectl`.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir().join("kubectl")
    }

    /// `<state-dir>/kubeconfig`.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }

    /// `<state-dir>/env`.
    pub fn env_path(&self) -> PathBuf {
        self.state_dir.join("env")
    }

    /// Starts the control plane, or returns the one already running from
    /// [`ControlPlaneConfig::state_dir`] if it is healthy (same version, every
    /// component alive, `/readyz` ok). Builds first if needed
    /// ([`ControlPlaneConfig::ensure_built`]).
    ///
    /// A fresh start wipes the state directory (stopping leftovers of an unhealthy
    /// control plane), generates PKI and the admin token, picks free loopback ports,
    /// starts etcd, then kube-apiserver, kube-controller-manager and kube-scheduler
    /// detached, and waits for `/readyz` and the `default` service account (typically a
    /// few seconds). Concurrent callers are serialized by `<state>/lock`.
    ///
    /// # Errors
    /// Build failure; a component exiting or not getting ready within
    /// [`ControlPlaneConfig::ready_timeout`] (the error holds its log tail; the
    /// processes are stopped and the state directory kept for inspection).
    pub async fn up(&self) -> anyhow::Result<ControlPlane> {
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.ensure_built()).await??;
        std::fs::create_dir_all(&self.state_dir)
            .with_context(|| format!("creating {}", self.state_dir.display()))?;
        let _lock = FileLock::acquire_async(&self.state_dir.join("lock")).await?;
        if let Some(running) = self.status().await? {
            return Ok(running);
        }
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.stop_and_wipe()).await??;
        self.start().await
    }

    /// The running control plane of [`ControlPlaneConfig::state_dir`], if it is
    /// healthy: `state.json` names this version and bin dir, every component process
    /// is alive and `/readyz` answers `ok` within 5 s. Takes no lock.
    ///
    /// # Errors
    /// Only when the kubeconfig exists but cannot be loaded into a client.
    pub async fn status(&self) -> anyhow::Result<Option<ControlPlane>> {
        let Some(state) = State::load(&self.state_dir) else {
            return Ok(None);
        };
        if state.version != self.version || state.bin_dir != self.bin_dir() {
            return Ok(None);
        }
        if !state
            .components
            .iter()
            .all(|c| daemon::is_alive(c.pid, Some(&c.name)))
        {
            return Ok(None);
        }
        let cp = ControlPlane::from_state(self, state);
        let client = cp.client().await?;
        match tokio::time::timeout(Duration::from_secs(5), readyz(&client)).await {
            Ok(Ok(())) => Ok(Some(cp)),
            _ => Ok(None),
        }
    }

    /// Stops the control plane of [`ControlPlaneConfig::state_dir`] (SIGTERM to each
    /// component's process group, SIGKILL after 10 s) and removes the state directory's
    /// contents (all but the lock file). Returns whether any component was running.
    /// Blocks; waits for a concurrent [`ControlPlaneConfig::up`] to finish first.
    ///
    /// # Errors
    /// A component survives SIGKILL, or the state cannot be removed.
    pub fn down(&self) -> anyhow::Result<bool> {
        if !self.state_dir.exists() {
            return Ok(false);
        }
        let _lock = FileLock::acquire(&self.state_dir.join("lock"))?;
        self.stop_and_wipe()
    }

    /// Stops every recorded component and empties the state dir (lock held by caller).
    fn stop_and_wipe(&self) -> anyhow::Result<bool> {
        let state = State::load(&self.state_dir);
        // Reverse start order; pid files cover a start that failed before state.json.
        let mut pids: Vec<u32> = Vec::new();
        for name in COMPONENTS.iter().rev() {
            let from_state = state
                .as_ref()
                .and_then(|s| s.components.iter().find(|c| c.name == *name))
                .map(|c| c.pid);
            let from_file =
                std::fs::read_to_string(self.state_dir.join("pids").join(format!("{name}.pid")))
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
            for pid in [from_state, from_file].into_iter().flatten() {
                if !pids.contains(&pid) && daemon::is_alive(pid, Some(name)) {
                    pids.push(pid);
                }
            }
        }
        let was_running = !pids.is_empty();
        let survivors = daemon::stop_all(&pids, Duration::from_secs(10));
        if !survivors.is_empty() {
            bail!("control-plane processes survived SIGKILL: {survivors:?}");
        }
        wipe_except_lock(&self.state_dir)?;
        Ok(was_running)
    }

    /// Fresh start (lock held, state dir empty).
    async fn start(&self) -> anyhow::Result<ControlPlane> {
        let started = Instant::now();
        let dir = &self.state_dir;
        for sub in ["logs", "pids", "etcd", "certs"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let pki = certs::Pki::generate(dir)?;
        let admin_token = certs::random_token()?;
        certs::write_token_file(&dir.join("tokens.csv"), &admin_token)?;
        let ports = Ports::pick()?;
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        write_kubeconfig(&self.kubeconfig_path(), &server, &pki.ca_cert, &admin_token)?;

        let mut state = State {
            version: self.version.clone(),
            server,
            admin_token,
            bin_dir: self.bin_dir(),
            ports,
            components: Vec::new(),
        };
        let result = self.spawn_all(&pki, &mut state).await;
        let result = match result {
            Ok(()) => {
                let cp = ControlPlane::from_state(self, state.clone());
                self.wait_ready(&cp).await.map(|()| cp)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(cp) => {
                write_env_file(&self.env_path(), &cp)?;
                tracing::info!(elapsed = ?started.elapsed(), server = %cp.server, "control plane ready");
                Ok(cp)
            }
            Err(error) => {
                let pids: Vec<u32> = state.components.iter().rev().map(|c| c.pid).collect();
                daemon::stop_all(&pids, Duration::from_secs(5));
                Err(error.context(format!(
                    "starting the control plane (state and logs kept in {})",
                    dir.display()
                )))
            }
        }
    }

    /// Starts etcd, waits for its port, then the other three components.
    async fn spawn_all(&self, pki: &certs::Pki, state: &mut State) -> anyhow::Result<()> {
        let dir = &self.state_dir;
        let p = state.ports.clone();
        let path = |p: &Path| p.display().to_string();
        let kubeconfig = path(&self.kubeconfig_path());
        let etcd_client = format!("http://127.0.0.1:{}", p.etcd);
        let etcd_peer = format!("http://127.0.0.1:{}", p.etcd_peer);
        let etcd = vec![
            "--name=verge".to_owned(),
            format!("--data-dir={}", path(&dir.join("etcd"))),
            format!("--listen-client-urls={etcd_client}"),
            format!("--advertise-client-urls={etcd_client}"),
            format!("--listen-peer-urls={etcd_peer}"),
            format!("--initial-advertise-peer-urls={etcd_peer}"),
            format!("--initial-cluster=verge={etcd_peer}"),
            "--unsafe-no-fsync=true".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        self.spawn(state, "etcd", &etcd)?;
        let etcd_pid = state.components[0].pid;
        wait_port(
            p.etcd,
            Duration::from_secs(20),
            etcd_pid,
            &dir.join("logs/etcd.log"),
        )
        .await?;

        let apiserver = vec![
            format!("--etcd-servers={etcd_client}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", p.apiserver),
            format!("--tls-cert-file={}", path(&pki.apiserver_cert)),
            format!("--tls-private-key-file={}", path(&pki.apiserver_key)),
            format!("--client-ca-file={}", path(&pki.ca_cert)),
            format!("--token-auth-file={}", path(&dir.join("tokens.csv"))),
            "--authorization-mode=Node,RBAC".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            format!("--service-account-key-file={}", path(&pki.sa_pub)),
            format!("--service-account-signing-key-file={}", path(&pki.sa_key)),
            format!("--cert-dir={}", path(&dir.join("certs"))),
            "--allow-privileged=true".to_owned(),
            // The `kubernetes` Endpoints may not hold a loopback address; skip them.
            "--endpoint-reconciler-type=none".to_owned(),
        ];
        self.spawn(state, "kube-apiserver", &apiserver)?;

        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let controller_manager = vec![
            format!("--kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", p.controller_manager),
            format!("--cert-dir={}", path(&dir.join("certs"))),
            "--controllers=*".to_owned(),
            "--leader-elect=false".to_owned(),
            "--use-service-account-credentials=false".to_owned(),
            format!("--service-account-private-key-file={}", path(&pki.sa_key)),
            format!("--root-ca-file={}", path(&pki.ca_cert)),
            format!("--cluster-signing-cert-file={}", path(&pki.ca_cert)),
            format!("--cluster-signing-key-file={}", path(&pki.ca_key)),
            format!(
                "--node-monitor-grace-period={}",
                ms(self.node_monitor_grace_period)
            ),
            format!("--node-monitor-period={}", ms(self.node_monitor_period)),
        ];
        self.spawn(state, "kube-controller-manager", &controller_manager)?;

        let scheduler = vec![
            format!("--kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", p.scheduler),
            "--leader-elect=false".to_owned(),
        ];
        self.spawn(state, "kube-scheduler", &scheduler)?;
        state.save(dir)
    }

    /// Spawns one component detached and records its pid.
    fn spawn(&self, state: &mut State, name: &str, args: &[String]) -> anyhow::Result<()> {
        let log = self.state_dir.join("logs").join(format!("{name}.log"));
        let pid = daemon::spawn_detached(&self.bin_dir().join(name), args, &[], &log)?;
        std::fs::write(
            self.state_dir.join("pids").join(format!("{name}.pid")),
            format!("{pid}\n"),
        )?;
        state.components.push(Component {
            name: name.to_owned(),
            pid,
        });
        Ok(())
    }

    /// Waits for `/readyz` and the `default` service account, failing fast when a
    /// component exits.
    async fn wait_ready(&self, cp: &ControlPlane) -> anyhow::Result<()> {
        let client = cp.client().await?;
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), "default");
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            for c in &cp.components {
                if !daemon::is_alive(c.pid, Some(&c.name)) {
                    bail!(
                        "{} exited during start-up ({}); log tail:\n{}",
                        c.name,
                        daemon::describe_exit(c.pid),
                        crate::process::log_tail(&cp.log_path(&c.name), 30)
                    );
                }
            }
            let probe = async {
                readyz(&client).await?;
                accounts
                    .get_opt("default")
                    .await?
                    .context("service account default/default not created yet")?;
                anyhow::Ok(())
            };
            let last_error = match tokio::time::timeout(Duration::from_secs(5), probe).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "probe timed out".to_owned(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "control plane not ready after {:?} ({last_error}); kube-apiserver log tail:\n{}",
                    self.ready_timeout,
                    crate::process::log_tail(&cp.log_path("kube-apiserver"), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A running control plane (cheap to clone; holds paths and credentials, no
/// connections, so it may be used from any Tokio runtime).
#[derive(Debug, Clone)]
pub struct ControlPlane {
    version: String,
    state_dir: PathBuf,
    bin_dir: PathBuf,
    server: String,
    admin_token: String,
    components: Vec<Component>,
}

impl ControlPlane {
    fn from_state(config: &ControlPlaneConfig, state: State) -> Self {
        Self {
            version: state.version,
            state_dir: config.state_dir.clone(),
            bin_dir: state.bin_dir,
            server: state.server,
            admin_token: state.admin_token,
            components: state.components,
        }
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

    /// The state directory (layout in the [module docs](self)).
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
        let pid = daemon::spawn_detached(&self.bin_dir.join(name), &args, &[], &log)?;
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
}

/// GET `/readyz`; ok when the body is `ok`.
async fn readyz(client: &kube::Client) -> anyhow::Result<()> {
    let request = http::Request::get("/readyz").body(Vec::new())?;
    let body = client.request_text(request).await.context("GET /readyz")?;
    if body.trim() != "ok" {
        bail!("/readyz: {body}");
    }
    Ok(())
}

/// Waits until 127.0.0.1:`port` accepts TCP connections, failing when `pid()` exits.
async fn wait_port(port: u16, timeout: Duration, pid: u32, log: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if !daemon::is_alive(pid, None) {
            bail!(
                "etcd exited during start-up ({}); log tail:\n{}",
                daemon::describe_exit(pid),
                crate::process::log_tail(log, 30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "port {port} not open after {timeout:?}; log tail:\n{}",
                crate::process::log_tail(log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Loopback ports of the components.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ports {
    etcd: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
    scheduler: u16,
}

impl Ports {
    /// Five distinct free ports ([`crate::ports::free_port`]).
    fn pick() -> anyhow::Result<Self> {
        let ports = (0..5)
            .map(|_| crate::ports::free_port())
            .collect::<anyhow::Result<Vec<_>>>()
            .context("picking free loopback ports")?;
        Ok(Self {
            etcd: ports[0],
            etcd_peer: ports[1],
            apiserver: ports[2],
            controller_manager: ports[3],
            scheduler: ports[4],
        })
    }
}

/// One started component.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Component {
    /// Binary name, e.g. `kube-apiserver` (also the log and pid file name).
    name: String,
    pid: u32,
}

/// `<state>/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    version: String,
    server: String,
    admin_token: String,
    bin_dir: PathBuf,
    ports: Ports,
    components: Vec<Component>,
}

impl State {
    /// Reads `<dir>/state.json`; `None` when missing or unparsable.
    fn load(dir: &Path) -> Option<Self> {
        let bytes = std::fs::read(dir.join("state.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes `<dir>/state.json` (mode 0600: holds the admin token).
    fn save(&self, dir: &Path) -> anyhow::Result<()> {
        certs::write_file(
            &dir.join("state.json"),
            &serde_json::to_string_pretty(self)?,
            true,
        )
    }
}

/// Writes the admin kubeconfig (cluster/user/context `verge`).
fn write_kubeconfig(path: &Path, server: &str, ca_cert: &Path, token: &str) -> anyhow::Result<()> {
    let ca = std::fs::read(ca_cert).with_context(|| format!("reading {}", ca_cert.display()))?;
    let yaml = format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: verge\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n\
         - name: admin\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: verge\n  context:\n    cluster: verge\n    user: admin\n    namespace: default\n\
         current-context: verge\n",
        ca = certs::base64(&ca),
    );
    certs::write_file(path, &yaml, true)
}

/// Writes `<state>/env` from [`ControlPlane::env_lines`].
fn write_env_file(path: &Path, cp: &ControlPlane) -> anyhow::Result<()> {
    let mut text = cp.env_lines().join("\n");
    text.push('\n');
    certs::write_file(path, &text, true)
}

/// Removes every entry of `dir` except the `lock` file.
fn wipe_except_lock(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name() == "lock" {
            continue;
        }
        let path = entry.path();
        let result = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        result.with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}
