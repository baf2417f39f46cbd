//! End-to-end test support for Verge: start the real binaries (cloudhub, edgecontroller,
//! edgecore) against the real control plane from `verge-testkit`, and wait for what the
//! cluster shows.
//!
//! # Layout
//! - [`Cloud`]: cloudhub (one or more [`Replica`]s) + edgecontroller processes on loopback
//!   ports.
//! - [`Edge`]: one edgecore process with its own data directory and config file.
//! - [`wait_for`]: polls a condition with a deadline (from `verge_testkit::wait`).
//! - [`host`]: mount points, Docker bind sources and what another user can read.
//!
//! The scenarios themselves are in `tests/tests/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod cloud;
pub mod host;

pub use cloud::{Cloud, Replica};

use anyhow::Context as _;
use verge_testkit::netns::EdgeNetns;
use verge_testkit::process::{ChildProcess, workspace_bin};

pub use verge_edgecore::Config;
pub use verge_testkit::docker::{docker, remove_managed_containers};
pub use verge_testkit::ports::free_port;
pub use verge_testkit::wait::{create_namespace, ready_status, wait_for};

/// The edgecore configuration of every e2e edge: node `name` of `cloud` (joining on start
/// with its bootstrap token, the Verge CA pinned) with its data in `data_dir`; node status
/// computed every 2 s, a Lease of 8 s (edgecontroller renews it every 2 s, well inside the
/// kit's 10 s node-monitor-grace-period), reconnects after 200 ms to 2 s, the local test
/// image as the pod sandbox (no registry can be reached), and its DMI socket in `data_dir`
/// (edges run side by side).
pub fn edge_config(name: &str, cloud: &Cloud, data_dir: &Path) -> Config {
    let mut config = Config {
        node_name: name.to_owned(),
        data_dir: data_dir.to_owned(),
        ..Config::default()
    };
    config.edge_hub.server.clone_from(&cloud.edge_url);
    config.edge_hub.join_server = Some(cloud.join_url.clone());
    config.edge_hub.token.clone_from(&cloud.bootstrap_token);
    config.edge_hub.ca_cert_hash = Some(cloud.ca_cert_hash.clone());
    config.edge_hub.reconnect_initial_backoff = Duration::from_millis(200);
    config.edge_hub.reconnect_max_backoff = Duration::from_secs(2);
    config.edged.node_status_update_frequency = Duration::from_secs(2);
    config.edged.node_lease_duration_seconds = 8;
    config.edged.pod_sandbox_image = verge_testkit::docker::TEST_IMAGE.to_owned();
    config.edged.pod_sandbox_command = verge_testkit::docker::TEST_SANDBOX_COMMAND
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    // The host's Docker is shared with everything else on this machine (the kit's images,
    // other tests' images): a test edge never garbage-collects images, as kubelet's
    // `imageGCHighThresholdPercent: 100` (edge/tests/probes_gc.rs tests image GC itself).
    config.edged.gc.image_gc_high_threshold_percent = 100;
    config.device_twin.dmi_socket = data_dir.join("dmi.sock");
    // Many edges run side by side on the host: a free port instead of the default 10008.
    config.metrics_addr = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    config
}

/// Points `config` at `cloud` through `host` (an address of this host, e.g. a network
/// namespace's link), verifying cloudhub's certificate for `localhost` (which it names).
pub fn via_host(config: &mut Config, cloud: &Cloud, host: impl std::fmt::Display) {
    config.edge_hub.server = format!("https://{host}:{}", cloud.edge_port);
    config.edge_hub.join_server = Some(format!("https://{host}:{}", cloud.join_port));
    config.edge_hub.tls_server_name = Some("localhost".to_owned());
}

/// One edge node: an edgecore process with its data directory and config file.
#[derive(Debug)]
pub struct Edge {
    /// The node name.
    pub name: String,
    /// The process, once started.
    pub process: Option<ChildProcess>,
    config: PathBuf,
    dir: tempfile::TempDir,
    starts: u32,
    binary: Option<PathBuf>,
}

impl Edge {
    /// Prepares an edge named `name` of `cloud` with [`edge_config`].
    ///
    /// # Errors
    /// The data directory or config file cannot be written.
    pub fn new(name: &str, cloud: &Cloud) -> anyhow::Result<Self> {
        Self::with_config(name, cloud, |_| {})
    }

    /// Like [`Edge::new`], with `change` applied to the configuration before it is written.
    ///
    /// # Errors
    /// The data directory or config file cannot be written.
    pub fn with_config(
        name: &str,
        cloud: &Cloud,
        change: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("edgecore.yaml");
        let mut edge_config = edge_config(name, cloud, &dir.path().join("data"));
        change(&mut edge_config);
        std::fs::write(&config, edge_config.to_yaml()?)?;
        Ok(Self {
            name: name.to_owned(),
            process: None,
            config,
            dir,
            starts: 0,
            binary: None,
        })
    }

    /// The edge's data directory (holds `edgecore.redb`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The config file path.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Installs a copy of the workspace's edgecore as this edge's own binary,
    /// `<dir>/bin/edgecore` (what a NodeUpgradeJob replaces; the workspace's binary is shared
    /// by every test), and starts it from there from now on. Returns its path.
    ///
    /// # Errors
    /// The binary is missing or cannot be copied.
    pub fn install_binary(&mut self) -> anyhow::Result<PathBuf> {
        let bin = self.dir.path().join("bin");
        std::fs::create_dir_all(&bin)?;
        let installed = bin.join("edgecore");
        std::fs::copy(workspace_bin("edgecore")?, &installed)?;
        self.binary = Some(installed.clone());
        Ok(installed)
    }

    fn binary(&self) -> anyhow::Result<PathBuf> {
        self.binary
            .clone()
            .map_or_else(|| workspace_bin("edgecore"), Ok)
    }

    /// Starts (or restarts) the edgecore process.
    ///
    /// # Errors
    /// The binary is missing or cannot be started.
    pub fn start(&mut self) -> anyhow::Result<()> {
        let p = ChildProcess::spawn(
            self.binary()?,
            ["--config".to_owned(), self.config.display().to_string()],
            [("RUST_LOG", "info")],
        )?;
        self.process = Some(p);
        Ok(())
    }

    /// Starts (or restarts) the edgecore process inside network namespace `ns` (its only
    /// link to the cloud is the namespace's veth pair).
    ///
    /// # Errors
    /// The binary is missing or cannot be started.
    pub fn start_in(&mut self, ns: &EdgeNetns) -> anyhow::Result<()> {
        let mut cmd = ns.command(&self.binary()?);
        cmd.arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info");
        let log = self
            .dir
            .path()
            .join(format!("edgecore-{}.log", self.starts));
        self.starts += 1;
        self.process = Some(ChildProcess::spawn_command("edgecore", cmd, log)?);
        Ok(())
    }

    /// `kill -9` the edgecore process.
    ///
    /// # Errors
    /// The process is not running or cannot be signalled.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        let mut p = self.process.take().context("edgecore is not running")?;
        p.kill9()?;
        Ok(())
    }

    /// The last `n` log lines of edgecore, for failure messages.
    pub fn logs(&self, n: usize) -> String {
        self.process
            .as_ref()
            .map_or_else(String::new, |p| p.log_tail(n))
    }

    /// The whole log of the edgecore process (empty before it started).
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map_or_else(String::new, ChildProcess::log)
    }
}

impl Drop for Edge {
    /// Stops edgecore (SIGKILL) and removes every container it made (label
    /// `io.verge.managed=<node>`), so no test, passing or failing, leaves pods running on the
    /// shared Docker engine; then unmounts what edged mounted in its data directory (pods'
    /// tmpfs volumes), which a killed edgecore leaves behind.
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.kill9();
        }
        let _ = remove_managed_containers(|n| n == self.name);
        let _ = verge_testkit::mounts::unmount_under(self.dir.path());
    }
}

/// Ids of the (running, or with `all` also exited) Docker containers carrying every
/// `label=value` filter given.
///
/// # Errors
/// docker fails.
pub fn containers_with(labels: &[(&str, &str)], all: bool) -> anyhow::Result<Vec<String>> {
    let mut args = vec!["ps".to_owned(), "-q".to_owned()];
    if all {
        args.push("-a".to_owned());
    }
    for (k, v) in labels {
        args.push("--filter".to_owned());
        args.push(format!("label={k}={v}"));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(docker(&refs)?
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect())
}

/// A pod named `name` in `ns`, bound to `node` (no scheduler), whose one container `main`
/// sleeps in the local test image (never pulled).
///
/// # Errors
/// Never in practice (the JSON is fixed); kept fallible for `serde_json`.
pub fn sleeper_pod(
    ns: &str,
    name: &str,
    node: &str,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}
    }))?)
}

/// Waits until pod `name` has phase Running; returns it.
///
/// # Errors
/// API errors, or not Running within `timeout`.
pub async fn wait_running(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    wait_for(&format!("pod {name} Running"), timeout, || async {
        Ok(pods
            .get_opt(name)
            .await?
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
    })
    .await
}

/// A web server pod named `name` in `ns` on `node` with label `app: <app>`, answering its own
/// name to `GET /` on port 8080 (named `http`, busybox `httpd`), Ready once it listens.
///
/// # Errors
/// Never in practice (the JSON is fixed); kept fallible for `serde_json`.
pub fn web_pod(
    ns: &str,
    name: &str,
    app: &str,
    node: &str,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": ns, "labels": { "app": app } },
        "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "echo $(hostname) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"],
                "ports": [{ "name": "http", "containerPort": 8080 }],
                "readinessProbe": { "tcpSocket": { "port": 8080 }, "periodSeconds": 1 } }] }
    }))?)
}

/// The Docker id of the running container `main` of the pod with uid `uid` (an edge pod).
///
/// # Errors
/// docker fails, or no such container runs.
pub fn main_container(uid: &str) -> anyhow::Result<String> {
    containers_with(
        &[
            ("io.kubernetes.pod.uid", uid),
            ("io.kubernetes.container.name", "main"),
        ],
        false,
    )?
    .pop()
    .with_context(|| format!("no running container main of pod {uid}"))
}

/// An HTTP/1.0 `GET /` from inside container `id` to `addr` (`ip:port` or `name:port`), with
/// busybox's `nc` (the test image's static `wget` cannot resolve, even an address); the
/// body, or the error text (`nc` says "Connection refused" for a refused connection).
///
/// # Errors
/// The error text: no body, or `docker exec` failed.
pub fn http_get_in(id: &str, addr: &str) -> Result<String, String> {
    let (ip, port) = addr.split_once(':').unwrap_or((addr, "80"));
    // busybox nc's -w bounds the connect only: `timeout` bounds the whole request.
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 nc -w 3 {ip} {port}");
    match docker(&["exec", id, "sh", "-c", &script]) {
        Ok(out) => out
            .split("\r\n\r\n")
            .nth(1)
            .map(|body| body.trim().to_owned())
            .filter(|body| !body.is_empty())
            .ok_or_else(|| format!("no body in {out:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The API resource of KubeEdge's `operations.kubeedge.io/v1alpha2` job kind `kind`
/// (`NodeUpgradeJob`, `ImagePrePullJob`, `ConfigUpdateJob`; plural: the kind lower-cased,
/// plus `s`).
pub fn operations_job(kind: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "operations.kubeedge.io".to_owned(),
        version: "v1alpha2".to_owned(),
        api_version: "operations.kubeedge.io/v1alpha2".to_owned(),
        kind: kind.to_owned(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// The status of operations job `name` once its phase is final (`Complated`, KubeEdge's
/// spelling, or `Failure`), looked at every half second; `between` runs before each look
/// (e.g. a supervisor starting a dead edgecore again).
///
/// # Errors
/// API errors, `between`'s, or no final phase within `timeout` (the error holds the status).
pub async fn wait_job_final(
    jobs: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    timeout: Duration,
    mut between: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<serde_json::Value> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        between()?;
        let status = jobs.get(name).await?.data["status"].clone();
        if matches!(status["phase"].as_str(), Some("Complated" | "Failure")) {
            return Ok(status);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{name} not done within {timeout:?}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The actions of a job's node entry (`actionFlow[].action`), in order.
pub fn job_actions(entry: &serde_json::Value) -> Vec<String> {
    entry["actionFlow"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["action"].as_str().map(str::to_owned))
        .collect()
}
