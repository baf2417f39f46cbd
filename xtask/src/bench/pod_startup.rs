//! `cargo xtask bench pod-startup`: for N pods on one edge node, the time from create to
//! Running as observed through the API (a watch), against a raw `docker run -d` of the same
//! image measured in the same run; prints p50/p99 and the ratio, and edgecore's resident
//! memory with 0 and with N pods running.

use std::collections::HashMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use verge_testkit::ControlPlaneConfig;

use super::percentile;
use crate::local;

/// Arguments of `cargo xtask bench pod-startup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of pods (and of raw `docker run`s).
    #[arg(long, default_value_t = 20)]
    pub pods: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const IMAGE: &str = "verge-test/busybox:latest";
const NODE: &str = "verge-bench-1";
const NAMESPACE: &str = "verge-bench";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.pods.max(1);
    local::ensure_host().await?;
    let run_dir = verge_testkit::paths::run_dir().join("bench");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let bin_dir = local::build_bins(!args.debug)?;
    let verge = local::start(&run_dir, &bin_dir, &cp, NODE, local::LOCAL_EDGED_CONFIG).await?;
    let result = measure(&cp, &verge, n).await;
    local::stop_processes(&run_dir);
    crate::control_plane::down(&config).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    n: usize,
) -> anyhow::Result<()> {
    verge.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle = local::rss_kib(verge.edgecore_pid).context("reading edgecore RSS")?;

    let baseline = docker_run_baseline(n)?;

    let client = cp.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    while namespaces.get_opt(NAMESPACE).await?.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    crate::local::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch = tokio::spawn({
        let pods = pods.clone();
        async move {
            let mut stream = watcher(pods, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                let objs: Vec<Pod> = match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
                    _ => vec![],
                };
                for p in objs {
                    if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                        let _ = tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
                    }
                }
            }
        }
    });

    let mut created = HashMap::new();
    for i in 0..n {
        let name = format!("bench-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "3600"]}]
            }
        }))?;
        created.insert(name, Instant::now());
        pods.create(&PostParams::default(), &pod).await?;
    }
    let mut startup = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60 + 3 * n as u64);
    while startup.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((name, at))) = tokio::time::timeout(left, rx.recv()).await else {
            bail!(
                "only {} of {n} pods Running before the deadline",
                startup.len()
            );
        };
        if let Some(t0) = created.get(&name) {
            startup.entry(name).or_insert(at - *t0);
        }
    }
    watch.abort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_busy = local::rss_kib(verge.edgecore_pid).context("reading edgecore RSS")?;

    let mut verge_times: Vec<Duration> = startup.into_values().collect();
    verge_times.sort();
    let (v50, v99) = (percentile(&verge_times, 50), percentile(&verge_times, 99));
    let (b50, b99) = (percentile(&baseline, 50), percentile(&baseline, 99));
    println!("pod-startup: {n} pods on one edge node (image {IMAGE})");
    println!("  verge   create -> Running (API watch): p50 {v50:>9.1?}  p99 {v99:>9.1?}");
    println!("  docker  run -d (baseline, same image): p50 {b50:>9.1?}  p99 {b99:>9.1?}");
    println!(
        "  ratio verge/docker:                    p50 {:>8.1}x  p99 {:>8.1}x",
        v50.as_secs_f64() / b50.as_secs_f64(),
        v99.as_secs_f64() / b99.as_secs_f64()
    );
    println!(
        "  edgecore RSS: {:.1} MiB with 0 pods, {:.1} MiB with {n} pods",
        rss_idle as f64 / 1024.0,
        rss_busy as f64 / 1024.0
    );

    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// `docker run -d` of the image `n` times (sequentially), timing each until the command
/// returns (the container is started); the containers are removed afterwards.
fn docker_run_baseline(n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let out = Command::new("docker")
            .args(["run", "-d", IMAGE, "sleep", "3600"])
            .output()?;
        times.push(t0.elapsed());
        if !out.status.success() {
            bail!(
                "docker run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let mut rm = Command::new("docker");
    rm.args(["rm", "-f"]).args(&ids);
    let _ = rm.output();
    times.sort();
    Ok(times)
}
