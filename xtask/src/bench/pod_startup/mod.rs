//! `cargo xtask bench pod-startup`: the time from create to Running as observed through the
//! API (a watch) on one edge node, against raw `docker run -d` of the same image measured in
//! the same run, at the same concurrency: first N pods one at a time (the latency of the
//! whole path: API, scheduler-free binding, cloudhub, redb, Docker, status back) against N
//! sequential `docker run -d`, then N pods created concurrently against N concurrent
//! `docker run -d` (throughput of the engine). Prints n, p50, p90, p99 (with at least 20
//! samples) and max of each, the ratios, and edgecore's resident memory with 0 and with N
//! pods running; then the same N pods one at a time on a traced Verge, cut into stages
//! ([`stages`]). Writes the tables to `docs/benchmarks.md`.

mod stages;

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use verge_testkit::docker::docker;

use crate::local;

/// Arguments of `cargo xtask bench pod-startup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods per mode (one at a time, then all at once), and `docker run`s of the baseline
    /// in each mode. A p99 is printed only with at least 20.
    #[arg(long, default_value_t = 20)]
    pub pods: usize,
    /// Pods running in all for the last memory figure (more are created at once after the
    /// burst; no more when not above `--pods`).
    #[arg(long, default_value_t = 100)]
    pub memory_pods: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;
const NODE: &str = "verge-bench-1";
const NAMESPACE: &str = "verge-bench";
/// The app container of every bench pod.
const CONTAINER: &str = "main";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.pods.max(1);
    let env = super::env::TracedEnv::up("bench", !args.debug).await?;
    let run_dir = env.run_dir.clone();
    let result = measure(&env, (n, args.memory_pods), !args.debug).await;
    env.down(&[&run_dir, &run_dir.join("traced")]).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    env: &super::env::TracedEnv,
    (n, memory_pods): (usize, usize),
    release: bool,
) -> anyhow::Result<()> {
    let (cp, jaeger) = (&env.cp, &env.jaeger);
    let (run_dir, bin_dir) = (env.run_dir.as_path(), env.bin_dir.as_path());
    // A fresh edge: the pods an earlier run left in its store would start again with it.
    for dir in [run_dir.to_owned(), run_dir.join("traced")] {
        local::stop_processes(&dir);
        let _ = std::fs::remove_dir_all(dir.join("edge"));
    }
    let verge = local::start(run_dir, bin_dir, cp, NODE, None).await?;
    verge.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    eprintln!("bench: {n} sequential `docker run -d`, then {n} concurrent ones");
    let docker_one = docker_run_baseline(n, false)?;
    let docker_all = docker_run_baseline(n, true)?;

    let client = cp.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // Pods an interrupted run left on its (stopped) nodes would hold the namespace up.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &Default::default(),
        )
        .await;
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    while namespaces.get_opt(NAMESPACE).await?.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    local::create_namespace(&client, NAMESPACE).await?;

    eprintln!("bench: {n} pods one at a time");
    let mut verge_one: Vec<Duration> = one_at_a_time(&pods, NODE, "one", n)
        .await?
        .iter()
        .map(|p| p.took)
        .collect();
    verge_one.sort();
    // Gone again before the burst, so the memory figure counts exactly N pods.
    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64);
    while !pods.list(&Default::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the one-at-a-time pods were not removed in time");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let traced_node = format!("{NODE}-traced");
    eprintln!("bench: {n} pods one at a time on {traced_node}, traced (stages)");
    let traced_dir = run_dir.join("traced");
    let endpoint = jaeger.otlp_grpc_endpoint();
    let traced = local::start(&traced_dir, bin_dir, cp, &traced_node, Some(&endpoint)).await?;
    traced.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = one_at_a_time(&pods, &traced_node, "traced", n).await?;
    let (stages, untraced) = stages::from_jaeger(jaeger, CONTAINER, &started).await?;
    if !untraced.is_empty() {
        eprintln!("bench: no complete trace of {}", untraced.join(", "));
    }
    // Their node stops now: its pods are removed at once, its containers by the bench.
    local::stop_processes(&traced_dir);
    local::remove_containers(&traced_dir);
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &Default::default(),
    )
    .await?;

    eprintln!("bench: {n} pods created at once");
    let mut verge_all = at_once(&pods, "bench", 0..n).await?;
    verge_all.sort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_busy =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;
    let many = memory_pods.max(n);
    if many > n {
        eprintln!(
            "bench: {} more pods at once, {many} in all (memory)",
            many - n
        );
        at_once(&pods, "bench", n..many).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let rss_many =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;
    local::stop_processes(run_dir);
    local::remove_containers(run_dir);
    // Their node is gone: removed at once, without waiting for an edge to confirm.
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &Default::default(),
    )
    .await?;

    let results = Results {
        n,
        release,
        verge_one,
        docker_one,
        verge_all,
        docker_all,
        rss_kib: [(0, rss_idle), (n, rss_busy), (many, rss_many)],
        stage_table: format!(
            "{}\n{} of {n} pods had a complete trace in Jaeger{}.\n",
            stages::table(&stages),
            stages.len(),
            if untraced.is_empty() {
                String::new()
            } else {
                format!(" (not: {})", untraced.join(", "))
            }
        ),
    };
    results.record()?;
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// Creates pods `<prefix>-<i>` for `range` at once; returns each one's create → Running
/// time (unsorted) once all are Running.
async fn at_once(
    pods: &Api<Pod>,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<Duration>> {
    let count = range.len() as u64;
    let mut running = watch_running(pods.clone());
    let creates = range.map(|i| {
        let pods = pods.clone();
        async move {
            let name = format!("{prefix}-{i}");
            let pod = bench_pod(&name)?;
            let t0 = Instant::now();
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok((name, t0))
        }
    });
    let created: HashMap<String, Instant> = futures::future::try_join_all(creates)
        .await?
        .into_iter()
        .collect();
    let times = running
        .wait_for(created, Duration::from_secs(60 + 3 * count))
        .await;
    running.task.abort();
    times
}

/// What one run measured.
struct Results {
    n: usize,
    release: bool,
    verge_one: Vec<Duration>,
    docker_one: Vec<Duration>,
    verge_all: Vec<Duration>,
    docker_all: Vec<Duration>,
    /// edgecore's VmRSS (KiB) with 0, N and the memory count of pods running.
    rss_kib: [(usize, u64); 3],
    stage_table: String,
}

/// KubeEdge's scale test: pod start-up p50 and p99 (its published figures).
const KUBEEDGE_POD_START: &str = "KubeEdge scale test: p50 1.69 s, p99 4.09 s";

impl Results {
    /// Prints the tables and writes them, with the targets, to `docs/benchmarks.md`.
    fn record(&self) -> anyhow::Result<()> {
        let n = self.n;
        let mut table = String::from(
            "| mode | what | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n",
        );
        for (mode, verge, docker) in [
            ("one at a time", &self.verge_one, &self.docker_one),
            ("all at once", &self.verge_all, &self.docker_all),
        ] {
            table.push_str(&rows(mode, verge, docker));
        }
        let mib = |kib: u64| kib as f64 / 1024.0;
        let memory = format!(
            "edgecore resident memory (VmRSS): {}.",
            self.rss_kib
                .iter()
                .map(|(pods, kib)| format!("{:.1} MiB with {pods} pods", mib(*kib)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let targets = super::record::targets_table(&self.targets());
        println!(
            "pod-startup on one edge node (image {IMAGE}; a pod is an infra and an app \
             container)\n{table}\n{memory}\n\nWhere the time goes (traced, one at a time):\n{}\n{targets}",
            self.stage_table
        );
        let body = format!(
            "{n} pods one at a time, then {n} pods created concurrently, on one edge node \
             (image `{IMAGE}`; a pod is an infra and an app container), timed from the create \
             call to `phase: Running` seen by an API watch; baseline: `docker run -d` of the \
             same image and command, sequential and then {n} concurrent, timed until the \
             command returns (container started). Then more pods at once, up to {} in all, \
             for the memory figure. Verge binaries: {} build.\n\n{table}\n{memory}\n\n\
             Where the time goes: the same {n} pods one at a time on a second edge node whose \
             Verge exports every span to Jaeger (sampling 1.0, which costs a few per cent, \
             see the tracing bench), each pod's trace cut at the pipeline's spans into \
             consecutive stages that add up to its create → Running time (the sandbox stage \
             includes the pod worker's start and the pause image check).\n\n{}\n{targets}",
            self.rss_kib[2].0,
            if self.release { "release" } else { "debug" },
            self.stage_table,
        );
        super::record::write(
            "pod-startup",
            "pod-startup: create → Running vs `docker run -d`",
            &body,
        )
    }

    /// The targets against this run's figures.
    fn targets(&self) -> Vec<super::record::Target> {
        use super::record::Target;
        let (one, d_one) = (
            super::Summary::of(&self.verge_one),
            super::Summary::of(&self.docker_one),
        );
        let (all, d_all) = (
            super::Summary::of(&self.verge_all),
            super::Summary::of(&self.docker_all),
        );
        let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let time_target = |goal: String, v: Duration, d: Duration, limit: f64| Target {
            goal,
            figure: format!("{:.2}× ({})", ratio(v, d), ms(v)),
            anchor: format!("`docker run -d` {} (same run); {KUBEEDGE_POD_START}", ms(d)),
            met: ratio(v, d) <= limit,
        };
        let n = self.n;
        let mut out = vec![time_target(
            "pod create → Running, one at a time: p50 ≤ 1.25× `docker run -d`".into(),
            one.p50,
            d_one.p50,
            1.25,
        )];
        if let (Some(v), Some(d)) = (one.p99, d_one.p99) {
            out.push(time_target(
                "pod create → Running, one at a time: p99 ≤ 1.5× `docker run -d`".into(),
                v,
                d,
                1.5,
            ));
        }
        out.push(time_target(
            format!("pod create → Running, {n} at once: p50 ≤ 1.3× `docker run -d`"),
            all.p50,
            d_all.p50,
            1.3,
        ));
        for ((pods, kib), limit) in self.rss_kib[1..].iter().zip([15.0, 25.0]) {
            let mib = *kib as f64 / 1024.0;
            out.push(Target {
                goal: format!("edgecore RSS with {pods} pods ≤ {limit} MiB (release)"),
                figure: format!("{mib:.1} MiB"),
                anchor: format!(
                    "{:.1} MiB with 0 pods (same run); KubeEdge's edgecore: about 70 MB",
                    self.rss_kib[0].1 as f64 / 1024.0
                ),
                met: mib <= limit,
            });
        }
        out
    }
}

/// Table rows of one mode: Verge, the docker baseline, and the ratios.
fn rows(mode: &str, verge: &[Duration], docker: &[Duration]) -> String {
    let (v, d) = (super::Summary::of(verge), super::Summary::of(docker));
    let ratio = |a: Duration, b: Duration| format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64());
    let p99 = match (v.p99, d.p99) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "–".to_owned(),
    };
    format!(
        "| {mode} | verge: create → Running | {} |\n\
         | {mode} | docker run -d | {} |\n\
         | {mode} | ratio verge / docker | | {} | {} | {p99} | {} |\n",
        super::record::duration_cells(&v),
        super::record::duration_cells(&d),
        ratio(v.p50, d.p50),
        ratio(v.p90, d.p90),
        ratio(v.max, d.max),
    )
}

/// Pods of the bench namespace seen `Running` by a watch, with the time they were seen.
pub(super) struct RunningWatch {
    rx: tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

/// Starts watching `pods` for `phase: Running`.
pub(super) fn watch_running(pods: Api<Pod>) -> RunningWatch {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
                continue;
            };
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                let _ = tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    RunningWatch { rx, task }
}

impl RunningWatch {
    /// Waits until every pod of `created` (name -> create time) was seen Running; returns
    /// each pod's create -> Running time.
    pub(super) async fn wait_for(
        &mut self,
        mut created: HashMap<String, Instant>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Duration>> {
        let deadline = Instant::now() + timeout;
        let mut times = Vec::with_capacity(created.len());
        while !created.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some((name, at))) = tokio::time::timeout(left, self.rx.recv()).await else {
                bail!("{} pods not Running within {timeout:?}", created.len());
            };
            if let Some(t0) = created.remove(&name) {
                times.push(at - t0);
            }
        }
        Ok(times)
    }
}

/// A pod started by [`one_at_a_time`]: its name, when its create call began (wall clock),
/// and how long until a watch saw it Running.
#[derive(Debug, Clone)]
pub(super) struct Started {
    pub(super) name: String,
    pub(super) created_at: SystemTime,
    pub(super) took: Duration,
}

/// Creates `n` pods `<prefix>-<i>` on `node` one after another, each waited for until a
/// watch sees it Running; returns them in creation order.
pub(super) async fn one_at_a_time(
    pods: &Api<Pod>,
    node: &str,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Vec<Started>> {
    let mut running = watch_running(pods.clone());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let (created_at, t0) = (SystemTime::now(), Instant::now());
        pods.create(&PostParams::default(), &bench_pod_on(&name, node)?)
            .await?;
        let took = running
            .wait_for([(name.clone(), t0)].into(), Duration::from_secs(60))
            .await?;
        out.push(Started {
            name,
            created_at,
            took: took[0],
        });
    }
    running.task.abort();
    Ok(out)
}

/// The benchmark's pod `name`, bound to the edge node.
fn bench_pod(name: &str) -> anyhow::Result<Pod> {
    bench_pod_on(name, NODE)
}

/// A pod `name` bound to `node`: one container of [`IMAGE`] sleeping an hour.
pub(super) fn bench_pod_on(name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": CONTAINER, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}]
        }
    }))?)
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
