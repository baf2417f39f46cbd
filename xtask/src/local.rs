//! A local Verge deployment as detached background processes: cloudhub, edgecontroller,
//! devicecontroller and one edgecore against a control plane, with configs, logs and pids in one run directory.
//! Used by `quickstart` and the benchmarks.
//!
//! Layout: this file starts the deployment; `build` builds the binaries, `configs` writes
//! the controllers' configurations, `processes` stops what a run started; [`edge_yaml`]
//! writes edgecore's configuration; [`extra_edges`] adds edge nodes that each run in a network namespace of
//! their own with a Docker engine of their own, in one site with the node on the host
//! (`cargo xtask conformance --nodes N`).

pub mod build;
mod configs;
pub mod edge_yaml;
pub mod extra_edges;
mod processes;

pub use build::{REAL_COMPONENTS, binary, build_bins, edgecore_profile};
pub use configs::{controller_config, deployed_controller_config, write};
pub use processes::{
    create_namespace, dmi_socket, free_port, remove_containers, settled_rss, start_mapper,
    status_kib, stop_processes, wait_for_port,
};

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use verge_testkit::wait::ready_status;
use verge_testkit::{ControlPlane, daemon};

/// The running processes of a local deployment.
#[derive(Debug)]
pub struct LocalVerge {
    /// The run directory (configs, `logs/`, `pids`).
    pub dir: PathBuf,
    /// The edge node's name.
    pub node_name: String,
    /// edgecore's pid.
    pub edgecore_pid: u32,
    /// The local MQTT broker (mosquitto) edgecore's eventbus uses: `tcp://127.0.0.1:<port>`,
    /// user [`verge_testkit::mosquitto::MOSQUITTO_USER`], password in `mqtt/client-password`.
    pub mqtt_url: String,
    /// How further edge nodes join cloudhub.
    pub hub: HubAccess,
}

/// What an edge node needs to join the deployment's cloudhub.
#[derive(Debug, Clone)]
pub struct HubAccess {
    /// cloudhub's edge port (on `127.0.0.1`, or on every address with
    /// [`StartOptions::hub_on_all_addresses`]).
    pub edge_port: u16,
    /// cloudhub's join port (bound as the edge port).
    pub join_port: u16,
    /// A bootstrap token, valid for an hour from the start.
    pub token: String,
    /// The Verge CA's pin, `sha256:<hex>`.
    pub ca_cert_hash: String,
}

/// How [`start_with`] differs from [`start`]'s defaults.
#[derive(Debug, Clone, Default)]
pub struct StartOptions<'a> {
    /// Export every process's spans to this OTLP endpoint (see
    /// [`crate::jaeger::tracing_yaml`]).
    pub otlp_endpoint: Option<&'a str>,
    /// cloudhub's edge and join ports on every address instead of `127.0.0.1`, so edges in
    /// network namespaces reach them through their links ([`extra_edges`]).
    pub hub_on_all_addresses: bool,
    /// The edge node's `edged.nodeIP` (default: the host's first address).
    pub node_ip: Option<Ipv4Addr>,
    /// The edge node's `edged.nodeLabels`.
    pub node_labels: Vec<(String, String)>,
}

/// Ensures the Debian packages, the Docker engine and the test image (blocking work on a
/// worker thread).
pub async fn ensure_host() -> anyhow::Result<()> {
    tokio::task::spawn_blocking(|| -> anyhow::Result<()> {
        verge_testkit::packages::ensure_packages()?;
        verge_testkit::docker::ensure_docker()?;
        verge_testkit::docker::ensure_test_image()
    })
    .await?
}

/// edgecore's default `metricsAddr` port.
const DEFAULT_EDGE_METRICS_PORT: u16 = 10008;

/// Starts cloudhub, edgecontroller, devicecontroller (after installing the device CRDs) and
/// edgecore from `bin_dir` against `cp`, each exporting its spans to `otlp_endpoint` when
/// given (see [`crate::jaeger::tracing_yaml`]), stopping
/// whatever an earlier start left in `dir`. TLS and authentication are on as in production:
/// cloudhub keeps the Verge CA in the cluster, edgecontroller attaches with a token of its
/// service account, and edgecore joins with a new bootstrap token and the Verge CA's pin
/// (its earlier credentials are dropped, since the control plane and so the CA may be
/// new); edgecore serves metrics
/// on its default `127.0.0.1:10008`, or on a free port when another local edgecore holds
/// it. The edge never garbage-collects images: it shares this machine's Docker with the
/// user's own images.
pub async fn start(
    dir: &Path,
    bin_dir: &Path,
    cp: &ControlPlane,
    node_name: &str,
    otlp_endpoint: Option<&str>,
) -> anyhow::Result<LocalVerge> {
    let options = StartOptions {
        otlp_endpoint,
        ..StartOptions::default()
    };
    start_with(dir, bin_dir, cp, node_name, &options).await
}

/// [`start`] with `options`. What an earlier start left in `dir` is stopped first, the
/// edge nodes of [`extra_edges`] included.
pub async fn start_with(
    dir: &Path,
    bin_dir: &Path,
    cp: &ControlPlane,
    node_name: &str,
    options: &StartOptions<'_>,
) -> anyhow::Result<LocalVerge> {
    let tracing = crate::jaeger::tracing_yaml(options.otlp_endpoint);
    stop_processes(dir);
    let dir_clone = dir.to_owned();
    tokio::task::spawn_blocking(move || extra_edges::clean(&dir_clone)).await?;
    std::fs::create_dir_all(dir.join("logs"))?;
    std::fs::write(dir.join("node"), node_name)?;
    let (edge_port, ctrl_port, join_port) = (free_port()?, free_port()?, free_port()?);
    let client = cp.client().await?;
    verge_testkit::trust::ensure_controller_accounts(&client).await?;
    verge_testkit::install_device_crds(cp).await?;
    // The shipped RBAC and admission policies (deploy/cloud/access), among them the one that
    // keeps pods asking for edge nodes through a lost link (docs/offline.md).
    verge_testkit::install_cloud_rbac(cp).await?;
    let token = verge_testkit::trust::create_bootstrap_token(
        &client,
        verge_testkit::trust::TokenKind::Valid,
        Duration::from_secs(3600),
    )
    .await?;
    let hub_host = if options.hub_on_all_addresses {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let cloudhub_cfg = crate::jaeger::append_section(
        write(
            dir,
            "cloudhub.yaml",
            &format!(
                "edgeAddr: {hub_host}:{edge_port}\ncontrollerAddr: 127.0.0.1:{ctrl_port}\n\
             joinAddr: {hub_host}:{join_port}\nhealthAddr: 127.0.0.1:0\n\
             streams: {{addr: \"127.0.0.1:0\", kubeletClientCaFile: {}, \
             kubeletClientNames: [kube-apiserver-kubelet-client, {}]}}\n",
                cp.ca_cert_path().display(),
                verge_testkit::metrics_server::CLIENT_NAME,
            ),
        )?,
        &tracing,
    )?;
    // A fresh join: its credentials are removed, and so is the Node an earlier run
    // registered (cloudhub refuses a join under an existing Node's name; deleting the Node
    // is the operator's step before a node joins anew).
    let _ = std::fs::remove_dir_all(dir.join("edge").join("pki"));
    // The metadata store belongs to the earlier join too: after a new control plane (a new
    // etcd, whose resourceVersions start low again) its objects would look newer than the
    // cluster's own (the `kubernetes` EndpointSlice with the old API server port, ...).
    let _ = std::fs::remove_file(dir.join("edge").join("edgecore.redb"));
    // And the edge API's kept answers and serving certificate (of the earlier cluster's CA).
    let _ = std::fs::remove_dir_all(dir.join("edge").join("edge-api"));
    verge_testkit::trust::forget_node(&client, node_name).await?;
    let (mqtt_url, mqtt_pid) = start_broker(dir).await?;
    // The default metrics and health address, unless another local edgecore (a benchmark's
    // second node) holds it already.
    let metrics_addr =
        if std::net::TcpListener::bind(("127.0.0.1", DEFAULT_EDGE_METRICS_PORT)).is_ok() {
            None
        } else {
            Some(format!("127.0.0.1:{}", free_port()?))
        };
    // The edge pins the Verge CA (cloudhub offers no token CA discovery), so its
    // configuration is written once cloudhub has published the CA, before edgecore starts.
    let edgecore_cfg = dir.join("edgecore.yaml").display().to_string();
    let data_dir = dir.join("edge");
    let (dmi, password_file) = (dmi_socket(dir), dir.join("mqtt").join("client-password"));
    let edgecore_yaml = |ca_hash: &str| {
        edge_yaml::EdgeYaml {
            node_name,
            data_dir: &data_dir,
            server: format!("https://127.0.0.1:{edge_port}"),
            join_server: format!("https://127.0.0.1:{join_port}"),
            tls_server_name: None,
            token: &token,
            ca_cert_hash: ca_hash,
            node_ip: options.node_ip,
            node_labels: &options.node_labels,
            runtime_endpoint: None,
            dmi_socket: &dmi,
            event_bus: Some((&mqtt_url, &password_file)),
            metrics_addr: metrics_addr.clone(),
        }
        .render()
    };
    // Each service runs as its own service account with the shipped RBAC, as deployed: an
    // admin's credentials would also change how the API server treats edgecontroller's
    // node impersonation (it remembers per requesting user which impersonation mode last
    // worked, so an admin's legacy impersonation elsewhere would make edgecontroller's
    // requests act as a user without the `system:nodes` group).
    let mut kubeconfigs = std::collections::HashMap::new();
    let mut hub_tokens = std::collections::HashMap::new();
    for service in ["cloudhub", "edgecontroller", "devicecontroller"] {
        let (kubeconfig, hub_token) =
            verge_testkit::trust::service_account_credentials(cp, service, dir).await?;
        kubeconfigs.insert(service, kubeconfig.display().to_string());
        hub_tokens.insert(service, hub_token);
    }
    let mut pids = vec![format!("mosquitto {mqtt_pid}")];
    let mut edgecore_pid = 0;
    let mut ca_cert_hash = String::new();
    for (name, argv) in [
        (
            "cloudhub",
            vec![
                "--config".to_owned(),
                cloudhub_cfg,
                "--kubeconfig".to_owned(),
                kubeconfigs["cloudhub"].clone(),
            ],
        ),
        (
            "edgecontroller",
            vec![
                "--config".to_owned(),
                crate::jaeger::append_section(
                    deployed_controller_config(
                        dir,
                        "edgecontroller",
                        ctrl_port,
                        &hub_tokens["edgecontroller"],
                    )?,
                    &tracing,
                )?,
                "--kubeconfig".to_owned(),
                kubeconfigs["edgecontroller"].clone(),
            ],
        ),
        (
            "devicecontroller",
            vec![
                "--config".to_owned(),
                crate::jaeger::append_section(
                    deployed_controller_config(
                        dir,
                        "devicecontroller",
                        ctrl_port,
                        &hub_tokens["devicecontroller"],
                    )?,
                    &tracing,
                )?,
                "--kubeconfig".to_owned(),
                kubeconfigs["devicecontroller"].clone(),
            ],
        ),
        ("edgecore", vec!["--config".to_owned(), edgecore_cfg]),
    ] {
        if name == "edgecore" {
            ca_cert_hash = verge_testkit::trust::verge_ca_hash(&client).await?;
            let written = write(dir, "edgecore.yaml", &edgecore_yaml(&ca_cert_hash))?;
            crate::jaeger::append_section(written, &tracing)?;
        }
        let log = dir.join("logs").join(format!("{name}.log"));
        let pid = daemon::spawn_detached(&binary(bin_dir, name), &argv, &[], &log)?;
        eprintln!("  {name} pid {pid}, log {}", log.display());
        pids.push(format!("{name} {pid}"));
        std::fs::write(dir.join("pids"), pids.join("\n") + "\n")?;
        match name {
            "cloudhub" => wait_for_port(edge_port, Duration::from_secs(20)).await?,
            "edgecore" => edgecore_pid = pid,
            _ => {}
        }
    }
    Ok(LocalVerge {
        dir: dir.to_owned(),
        node_name: node_name.to_owned(),
        edgecore_pid,
        mqtt_url,
        hub: HubAccess {
            edge_port,
            join_port,
            token,
            ca_cert_hash,
        },
    })
}

/// Starts a private mosquitto for the local edge node (detached, 127.0.0.1 only, one user
/// with a random password, files in `dir/mqtt`) and waits until it listens. Returns its URL
/// and pid.
async fn start_broker(dir: &Path) -> anyhow::Result<(String, u32)> {
    use verge_testkit::mosquitto;
    tokio::task::spawn_blocking(mosquitto::ensure_mosquitto).await??;
    let mqtt = dir.join("mqtt");
    let _ = std::fs::remove_dir_all(&mqtt);
    std::fs::create_dir_all(&mqtt)?;
    std::fs::set_permissions(&mqtt, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    mosquitto::write_credentials(&mqtt)?;
    let port = free_port()?;
    let config = mosquitto::write_config(&mqtt, port)?;
    let log = dir.join("logs").join("mosquitto.log");
    let argv = ["-c".to_owned(), config.display().to_string()];
    let pid = daemon::spawn_detached(Path::new(mosquitto::MOSQUITTO_BIN), &argv, &[], &log)?;
    eprintln!("  mosquitto pid {pid}, log {}", log.display());
    wait_for_port(port, Duration::from_secs(15)).await?;
    Ok((format!("tcp://127.0.0.1:{port}"), pid))
}

impl LocalVerge {
    /// Waits until the edge node's Ready condition is True.
    ///
    /// # Errors
    /// API errors, or not Ready within `timeout` (the error names the log directory).
    pub async fn wait_ready(&self, cp: &ControlPlane, timeout: Duration) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(cp.client().await?);
        let deadline = Instant::now() + timeout;
        loop {
            let ready = nodes
                .get_opt(&self.node_name)
                .await?
                .is_some_and(|n| ready_status(&n).as_deref() == Some("True"));
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "node {} not Ready after {timeout:?}; see the logs in {}",
                    self.node_name,
                    self.dir.join("logs").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
