//! `cargo xtask quickstart`: the main job on one machine — a local Kubernetes control
//! plane, cloudhub, edgecontroller, devicecontroller, a private MQTT broker and one
//! edgecore, all as background processes, a sample Deployment running on the edge node and
//! a simulated thermometer reporting through a mapper into its DeviceStatus.
//!
//! Steps (each prints progress): Debian packages, Docker and the test image; the control
//! plane (built once into the cache, then started; its state in
//! `~/.cache/verge/run/quickstart/control-plane`); Jaeger (built once, then started or
//! reused; `verge_testkit::jaeger`), whose UI address it prints; `cargo build --bins`; the
//! Verge processes (configs, logs and pids in `~/.cache/verge/run/quickstart/`), exporting
//! their spans to Jaeger; then it waits
//! until the edge node is Ready, applies `deploy/examples/edge-deployment.yaml` pinned to
//! the node, waits until its pods are Running, prints `kubectl get pods -o wide`, the trace
//! id of the first pod's creation (found in Jaeger by the span tag `k8s.pod.name`) and the
//! `export KUBECONFIG=...` line; then it starts the virtual mapper, applies
//! `deploy/examples/devices/` for the node and waits until the DeviceStatus `thermometer`
//! shows a reported temperature, and exits 0. `cargo xtask down` stops everything.
//!
//! With `--deployed` the cloud side runs as pods on the test kit's kubelet node instead, as
//! docs/install.md tells an operator ([`deployed`]).

mod deployed;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use verge_testkit::ControlPlaneConfig;

use crate::local;

/// Arguments of `cargo xtask quickstart`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of the edge node to start.
    #[arg(long, default_value = "verge-edge-1")]
    pub node_name: String,
    /// How long to wait for the edge node, then for the sample pods, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
    /// Run cloudhub, edgecontroller and devicecontroller as pods on a kubelet node
    /// (`cargo xtask images`, `kubectl apply -k deploy/cloud`) and install the edge from
    /// `deploy/edge` as docs/install.md says, instead of running them as local processes.
    #[arg(long)]
    pub deployed: bool,
    /// With `--deployed`: the cargo profile of the images. `release` builds what users get
    /// (a cold build takes about 15 minutes on two cores, and edgecore's size-optimised `edge`
    /// profile a few more); `images-test` takes a few.
    #[arg(long, default_value = "release", requires = "deployed")]
    pub profile: String,
}

/// The quickstart's run directory: `~/.cache/verge/run/quickstart`.
pub fn run_dir() -> PathBuf {
    verge_testkit::paths::run_dir().join("quickstart")
}

/// The control-plane configuration of the quickstart (its own state directory, so
/// `cargo xtask test` never stops it).
pub fn control_plane_config() -> ControlPlaneConfig {
    ControlPlaneConfig {
        state_dir: run_dir().join("control-plane"),
        ..ControlPlaneConfig::from_env()
    }
}

/// The kubelet node of `--deployed`: its own run directory under [`run_dir`].
pub fn node_config() -> verge_testkit::KubeletNodeConfig {
    verge_testkit::KubeletNodeConfig {
        run_dir: run_dir().join("kubelet-node"),
        ..verge_testkit::KubeletNodeConfig::from_env()
    }
}

/// Runs the quickstart.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.deployed {
        return deployed::run(args).await;
    }
    let started = Instant::now();
    let timeout = Duration::from_secs(args.timeout_secs);
    eprintln!("quickstart: [1/8] Debian packages, Docker engine and the local test image");
    local::ensure_host().await?;

    eprintln!("quickstart: [2/8] cargo build --bins");
    let bin_dir = local::build_bins(false)?;

    eprintln!("quickstart: [3/8] Kubernetes control plane (the first build takes ~10 minutes)");
    let cp = crate::control_plane::up(&ControlPlaneConfig {
        // kubectl logs/exec: the API server's streams front runs this cloudhub.
        front_bin_dir: Some(bin_dir.clone()),
        ..control_plane_config()
    })
    .await?;

    eprintln!("quickstart: [4/8] Jaeger (the first build takes a few minutes)");
    let jaeger = crate::jaeger::up(&verge_testkit::jaeger::JaegerConfig::from_env()).await?;

    eprintln!("quickstart: [5/8] starting cloudhub, edgecontroller, devicecontroller and edgecore");
    let otlp = jaeger.otlp_grpc_endpoint();
    let verge = local::start(&run_dir(), &bin_dir, &cp, &args.node_name, Some(&otlp)).await?;

    eprintln!(
        "quickstart: [6/8] waiting for node {} to be Ready",
        args.node_name
    );
    verge.wait_ready(&cp, timeout).await?;
    let _ = cp
        .kubectl_command()
        .args(["get", "nodes", "-o", "wide"])
        .status();

    eprintln!("quickstart: [7/8] applying a sample Deployment to the edge node");
    sample_deployment(&cp, &args)?;
    first_pod_trace(&cp, &jaeger).await;
    exec_into_sample(&cp);
    eprintln!("quickstart: [8/8] devices: the virtual mapper and the example thermometer");
    devices(&cp, &bin_dir, &args).await?;
    eprintln!(
        "quickstart: edge apps reach the node's MQTT broker at {}",
        verge.mqtt_url
    );
    eprintln!("quickstart: Jaeger UI and query API at {}", jaeger.ui_url());
    eprintln!(
        "quickstart: ready after {:.1?}; `cargo xtask down` stops it all",
        started.elapsed()
    );
    println!("export KUBECONFIG={}", cp.kubeconfig().display());
    Ok(ExitCode::SUCCESS)
}

/// Applies `deploy/examples/edge-deployment.yaml` pinned to the edge node, waits until it
/// is rolled out and prints `kubectl get pods -o wide`.
///
/// # Errors
/// kubectl fails or the Deployment is not available within the timeout.
pub fn sample_deployment(cp: &verge_testkit::ControlPlane, args: &Args) -> anyhow::Result<()> {
    let manifest = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/edge-deployment.yaml"),
    )?
    .replace("verge-edge-1", &args.node_name);
    let manifest_path = run_dir().join("edge-deployment.yaml");
    std::fs::write(&manifest_path, manifest)?;
    let status = cp
        .kubectl_command()
        .arg("apply")
        .arg("-f")
        .arg(&manifest_path)
        .status()?;
    if !status.success() {
        bail!("kubectl apply failed: {status}");
    }
    let status = cp
        .kubectl_command()
        .args(["rollout", "status", "deployment/hello-edge", "--timeout"])
        .arg(format!("{}s", args.timeout_secs))
        .status()?;
    if !status.success() {
        bail!(
            "the sample Deployment did not become available; logs in {}",
            run_dir().join("logs").display()
        );
    }
    let _ = cp
        .kubectl_command()
        .args(["get", "pods", "-o", "wide"])
        .status();
    Ok(())
}

/// Runs `kubectl exec deploy/hello-edge -- wget -qO- localhost:8080` (through the API
/// server, cloudhub and the node's session, architecture.md §10) and prints what it shows;
/// a warning with kubectl's error when it fails.
fn exec_into_sample(cp: &verge_testkit::ControlPlane) {
    let args = [
        "exec",
        "deploy/hello-edge",
        "--",
        "wget",
        "-qO-",
        "http://127.0.0.1:8080/",
    ];
    eprintln!("quickstart: kubectl {}", args.join(" "));
    match cp.kubectl_command().args(args).output() {
        Ok(out) if out.status.success() => {
            eprint!("{}", String::from_utf8_lossy(&out.stdout));
        }
        Ok(out) => eprintln!(
            "quickstart: warning: kubectl exec failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(error) => eprintln!("quickstart: warning: kubectl exec: {error}"),
    }
}

/// Prints the trace id (and UI link) of the creation of the sample Deployment's first pod,
/// found in Jaeger by its span tag `k8s.pod.name`; a warning when there is none.
async fn first_pod_trace(cp: &verge_testkit::ControlPlane, jaeger: &verge_testkit::jaeger::Jaeger) {
    let pod = match cp
        .kubectl_command()
        .args([
            "get",
            "pods",
            "-l",
            "app=hello-edge",
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => {
            eprintln!(
                "quickstart: warning: listing the sample pods failed: {}",
                out.status
            );
            return;
        }
        Err(e) => {
            eprintln!("quickstart: warning: running kubectl: {e}");
            return;
        }
    };
    match crate::jaeger::pod_creation_trace(jaeger, &pod, Duration::from_secs(30)).await {
        Ok(trace) => eprintln!(
            "quickstart: pod {pod} was created in trace {} ({} spans from {}): {}",
            trace.trace_id,
            trace.spans.len(),
            trace.services().join(", "),
            jaeger.trace_url(&trace.trace_id)
        ),
        Err(e) => eprintln!("quickstart: warning: no trace of pod {pod} in Jaeger: {e:#}"),
    }
}

/// Starts the virtual mapper, applies the example DeviceModel and Device for the node and
/// waits until the DeviceStatus shows a reported temperature; prints it.
async fn devices(
    cp: &verge_testkit::ControlPlane,
    bin_dir: &std::path::Path,
    args: &Args,
) -> anyhow::Result<()> {
    local::start_mapper(&run_dir(), bin_dir, "virtual")?;
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/devices");
    for file in ["thermometer-model.yaml", "thermometer-device.yaml"] {
        let text =
            std::fs::read_to_string(examples.join(file))?.replace("verge-edge-1", &args.node_name);
        let path = run_dir().join(file);
        std::fs::write(&path, text)?;
        let status = cp
            .kubectl_command()
            .arg("apply")
            .arg("-f")
            .arg(&path)
            .status()?;
        if !status.success() {
            bail!("kubectl apply -f {} failed: {status}", path.display());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    loop {
        let out = cp
            .kubectl_command()
            .args([
                "get",
                "devicestatus",
                "thermometer",
                "-o",
                "jsonpath={range .status.twins[*]}{.propertyName}={.reported.value} {end}",
            ])
            .output()?;
        let twins = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && twins.contains("temperature=") {
            eprintln!("quickstart: DeviceStatus thermometer: {}", twins.trim());
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the thermometer's DeviceStatus shows no reported temperature; logs in {}",
                run_dir().join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
