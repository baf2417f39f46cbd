//! `cargo xtask bench pod-startup`: the time from create to Running as observed through the
//! API (a watch) on one edge node, against raw `docker run -d` of the same image measured in
//! the same run, at the same concurrency: first a few pods one at a time (the latency of the
//! whole path: API, scheduler-free binding, cloudhub, redb, Docker, status back), then N pods
//! created at once against N concurrent `docker run -d` (throughput of the engine). Prints
//! p50/p99 and the ratios, and edgecore's resident memory with 0 and with N pods running.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use verge_testkit::ControlPlaneConfig;
use verge_testkit::docker::docker;

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

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;
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
    let verge = local::start(
        &run_dir,
        &bin_dir,
        &cp,
        NODE,
        verge_testkit::docker::EDGED_TEST_CONFIG,
    )
    .await?;
    let result = measure(&cp, &verge, n).await;
    local::stop_processes(&run_dir);
    local::remove_containers(&run_dir);
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
    let rss_idle =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    let docker_one = docker_run_baseline(SINGLE, false)?;
    let docker_all = docker_run_baseline(n, true)?;

    let client = cp.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    while namespaces.get_opt(NAMESPACE).await?.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    local::create_namespace(&client, NAMESPACE).await?;
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

    // One at a time.
    let mut verge_one = Vec::new();
    for i in 0..SINGLE {
        let name = format!("one-{i}");
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &bench_pod(&name)?)
            .await?;
        let deadline = t0 + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some((seen, at))) = tokio::time::timeout(left, rx.recv()).await else {
                bail!("pod {name} not Running within 60 s");
            };
            if seen == name {
                verge_one.push(at - t0);
                break;
            }
        }
    }
    verge_one.sort();
    // Gone again before the burst, so the memory figure counts exactly N pods.
    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pods.list(&Default::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the one-at-a-time pods were not removed within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // All at once.
    let mut created = HashMap::new();
    for i in 0..n {
        let name = format!("bench-{i}");
        let pod = bench_pod(&name)?;
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
    let rss_busy =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    let mut verge_all: Vec<Duration> = startup.into_values().collect();
    verge_all.sort();
    println!(
        "pod-startup on one edge node (image {IMAGE}; a pod is an infra and an app container)"
    );
    report(
        &format!("{SINGLE} pods one at a time"),
        &verge_one,
        &docker_one,
    );
    report(&format!("{n} pods at once"), &verge_all, &docker_all);
    println!(
        "  edgecore RSS: {:.1} MiB with 0 pods, {:.1} MiB with {n} pods",
        rss_idle as f64 / 1024.0,
        rss_busy as f64 / 1024.0
    );

    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// How many pods (and `docker run`s) are timed one at a time.
const SINGLE: usize = 5;

/// The benchmark's pod `name`, bound to the edge node.
fn bench_pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}]
        }
    }))?)
}

/// Prints one verge/docker comparison: p50 and p99 of each and their ratios.
fn report(what: &str, verge: &[Duration], docker: &[Duration]) {
    let (v50, v99) = (percentile(verge, 50), percentile(verge, 99));
    let (b50, b99) = (percentile(docker, 50), percentile(docker, 99));
    println!("  {what}:");
    println!("    verge   create -> Running (API watch): p50 {v50:>9.1?}  p99 {v99:>9.1?}");
    println!("    docker  run -d, same concurrency:      p50 {b50:>9.1?}  p99 {b99:>9.1?}");
    println!(
        "    ratio verge/docker:                    p50 {:>8.1}x  p99 {:>8.1}x",
        v50.as_secs_f64() / b50.as_secs_f64(),
        v99.as_secs_f64() / b99.as_secs_f64()
    );
}

/// `docker run -d` of the image `n` times, one after another or all at once (a thread
/// each), timing each until the command returns (the container is started); the containers
/// are removed afterwards. Returns the sorted times.
fn docker_run_baseline(n: usize, concurrent: bool) -> anyhow::Result<Vec<Duration>> {
    let run = || -> anyhow::Result<(Duration, String)> {
        let t0 = Instant::now();
        let id = docker(&["run", "-d", IMAGE, "sleep", "3600"])?;
        Ok((t0.elapsed(), id))
    };
    let results: Vec<anyhow::Result<(Duration, String)>> = if concurrent {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|_| s.spawn(run)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("docker run thread panicked")))
                })
                .collect()
        })
    } else {
        (0..n).map(|_| run()).collect()
    };
    let mut times = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    let mut failure = None;
    for r in results {
        match r {
            Ok((t, id)) => {
                times.push(t);
                ids.push(id);
            }
            Err(e) => failure = Some(e),
        }
    }
    let rm: Vec<&str> = ["rm", "-f"]
        .into_iter()
        .chain(ids.iter().map(String::as_str))
        .collect();
    let _ = docker(&rm);
    if let Some(e) = failure {
        return Err(e);
    }
    times.sort();
    Ok(times)
}
