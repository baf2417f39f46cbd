//! `cargo xtask bench edge-api`: the edge API (issue 33). On one local edge node (the
//! release build of cloudhub, edgecontroller and edgecore; the kit's control plane):
//! - edgecore's idle resident memory with the edge API off and on (edgecore restarted with
//!   each, the node otherwise the same);
//! - a list of the namespace's pods (N on the node) through the edge API online (over the
//!   link to the API server) against the API server directly, then offline from the node:
//!   the kept answer, and from metamanager's store (a label selector never asked online, so
//!   no answer was kept for it);
//! - watch event latency: a ConfigMap patched in the cloud, seen by a watch through the edge
//!   API and by one on the API server directly, at the same time; offline, the node's own
//!   change (a container killed, edged restarts it) seen by a pod watch;
//! - edgecore's memory before and after the edge API keeps answers for 10,000 objects (a GET
//!   of each of 10,000 ConfigMaps and their list).
//!
//! The client is the bench itself on the host, at the edge API's listener on the node's
//! pod-network gateway, verifying it as a pod does (the cluster CA of its `ca.crt`,
//! `kubernetes.default.svc`) with a token bound to a pod of the node; a pod reaches the same
//! listener through the `kubernetes` Service's DNAT.

mod client;
mod report;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::PostParams;

use crate::local;

/// Arguments of `cargo xtask bench edge-api`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods on the edge node (the list measured).
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// Measured lists per path (after 10 of warm-up).
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// ConfigMap patches of the online watch latency.
    #[arg(long, default_value_t = 50)]
    pub events: usize,
    /// Container kills of the offline watch latency.
    #[arg(long, default_value_t = 10)]
    pub kills: usize,
    /// Objects the edge API keeps answers for in the memory measurement.
    #[arg(long, default_value_t = 10_000)]
    pub objects: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

/// The bench's namespace, new each run (an interrupted run leaves its objects behind).
fn namespace() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| format!("verge-bench-edge-api-{}", std::process::id()))
}
const NODE: &str = "verge-bench-edge-api";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // A fresh edge node: the edge API keeps what it learnt of the last run's cluster (its
    // cache and CA survive restarts by design), and the control plane is made anew.
    let node_dir = verge_testkit::paths::run_dir()
        .join("bench-edge-api")
        .join(NODE);
    local::stop_processes(&node_dir);
    local::remove_containers(&node_dir);
    let _ = std::fs::remove_dir_all(node_dir.join("edge"));
    super::env::with_one_node(
        "bench-edge-api",
        NODE,
        !args.debug,
        false,
        async |cp, verge| measure(cp, verge, &args).await,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// What the bench measured, for [`report`].
pub struct Measured {
    /// edgecore's settled RSS (KiB), idle: edge API off, on.
    pub idle_kib: (u64, u64),
    /// Lists: the API server directly, the edge API online, offline kept, offline store.
    pub lists: [Vec<Duration>; 4],
    /// Watch events: the API server directly, the edge API online.
    pub events: [Vec<Duration>; 2],
    /// Offline: the node's own change to an open pod watch.
    pub own_changes: Vec<Duration>,
    /// edgecore's settled RSS (KiB) before and after the answers for the objects were kept.
    pub cache_kib: (u64, u64),
    /// The edge API's cache file after that, bytes.
    pub cache_file: u64,
    /// How long the GETs of the objects through the edge API took.
    pub cache_fill: Duration,
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    args: &Args,
) -> anyhow::Result<()> {
    let admin = cp.client().await?;
    let data_dir = verge.dir.join("edge");
    eprintln!("bench edge-api: [1/5] edgecore idle, edge API off and on (each after a restart)");
    let off = restart_edgecore(cp, verge, false).await?;
    let rss_off = local::settled_rss(off).await?;
    let on = restart_edgecore(cp, verge, true).await?;
    let rss_on = local::settled_rss(on).await?;

    eprintln!("bench edge-api: [2/5] {} pods on the node", args.pods);
    local::create_namespace(&admin, namespace()).await?;
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "view", "namespace": namespace() },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": namespace() }]
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), namespace())
        .create(&PostParams::default(), &binding)
        .await?;
    let pods = create_pods(&admin, args.pods).await?;
    let token = client::bound_token(&admin, namespace(), &pods[0].0).await?;
    let gateway = client::gateway(NODE)?;
    let ca = client::pod_ca(&admin, namespace(), &data_dir).await?;
    let edge = client::edge_api_client(&gateway, ca.clone(), &token)?;
    let edge_watcher = client::edge_api_client(&gateway, ca, &token)?;

    eprintln!(
        "bench edge-api: [3/5] {} lists of {} pods each way online, {} watch events",
        args.requests, args.pods, args.events
    );
    let list_path = format!("/api/v1/namespaces/{}/pods", namespace());
    let store_path = format!("{list_path}?labelSelector=app%3Dbench");
    for c in [&admin, &edge] {
        client::time_gets(c, &list_path, 10).await?;
    }
    // Interleaved in rounds of 10, so neither path gets a quieter moment.
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for _ in 0..args.requests.div_ceil(10) {
        direct.extend(client::time_gets(&admin, &list_path, 10).await?);
        through.extend(client::time_gets(&edge, &list_path, 10).await?);
    }
    direct.sort();
    through.sort();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace());
    let watched: ConfigMap = serde_json::from_value(
        serde_json::json!({ "metadata": { "name": "watched" }, "data": { "seq": "-" } }),
    )?;
    configmaps.create(&PostParams::default(), &watched).await?;
    let [events_direct, events_edge]: [Vec<Duration>; 2] = client::watch_latency(
        &admin,
        &[admin.clone(), edge_watcher.clone()],
        namespace(),
        "watched",
        args.events,
    )
    .await?
    .try_into()
    .map_err(|_| anyhow::anyhow!("two watchers"))?;

    eprintln!(
        "bench edge-api: [4/5] answers kept for {} ConfigMaps",
        args.objects
    );
    let cache_before = local::settled_rss(on).await?;
    create_configmaps(&admin, args.objects).await?;
    let started = Instant::now();
    fill_cache(&edge, args.objects).await?;
    let cache_fill = started.elapsed();
    let cache_after = local::settled_rss(on).await?;
    let cache_file = std::fs::metadata(data_dir.join("edge-api/cache.redb"))
        .map(|m| m.len())
        .unwrap_or_default();

    eprintln!("bench edge-api: [5/5] the link cut (cloudhub killed): offline lists and watch");
    // The API server's decision on this user watching pods, for the offline watch.
    let _ = Api::<Pod>::namespaced(edge_watcher.clone(), namespace())
        .watch(&kube::api::WatchParams::default().timeout(1), "0")
        .await?
        .collect::<Vec<_>>()
        .await;
    cut_link(verge)?;
    wait_offline(&edge).await?;
    eprintln!("bench edge-api: offline");
    client::time_gets(&edge, &list_path, 10).await?;
    client::time_gets(&edge, &store_path, 10).await?;
    let (mut kept, mut store) = (Vec::new(), Vec::new());
    for _ in 0..args.requests.div_ceil(10) {
        kept.extend(client::time_gets(&edge, &list_path, 10).await?);
        store.extend(client::time_gets(&edge, &store_path, 10).await?);
    }
    kept.sort();
    store.sort();
    eprintln!(
        "bench edge-api: offline lists done; killing {} containers",
        args.kills
    );
    let victims: Vec<(String, String)> = pods
        .iter()
        .skip(1)
        .take(args.kills)
        .map(|(p, id)| (p.metadata.name.clone().unwrap_or_default(), id.clone()))
        .collect();
    let own_changes = client::own_change_latency(&edge_watcher, namespace(), &victims).await?;

    report::report(
        args,
        &Measured {
            idle_kib: (rss_off, rss_on),
            lists: [direct, through, kept, store],
            events: [events_direct, events_edge],
            own_changes,
            cache_kib: (cache_before, cache_after),
            cache_file,
            cache_fill,
        },
    )
}

/// Restarts the node's edgecore with the edge API on or off (its configuration's `edgeApi`
/// section), waits until the node is Ready again, and returns the new pid (recorded in the
/// run's `pids` file, so the bench's cleanup stops it).
async fn restart_edgecore(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    edge_api: bool,
) -> anyhow::Result<u32> {
    let pids_file = verge.dir.join("pids");
    let pids = std::fs::read_to_string(&pids_file)?;
    let (line, old) = pids
        .lines()
        .find_map(|l| {
            let pid = l.strip_prefix("edgecore ")?.trim().parse::<u32>().ok()?;
            Some((l.to_owned(), pid))
        })
        .context("no edgecore in the pids file")?;
    let exe = std::fs::read_link(format!("/proc/{old}/exe")).context("edgecore's binary")?;
    verge_testkit::daemon::stop_all(&[old], Duration::from_secs(10));
    let config = verge.dir.join("edgecore.yaml");
    let text = std::fs::read_to_string(&config)?;
    let mut kept: String = text
        .split_inclusive('\n')
        .take_while(|l| !l.starts_with("edgeApi:"))
        .collect();
    kept.push_str(&format!("edgeApi:\n  enable: {edge_api}\n"));
    std::fs::write(&config, kept)?;
    let argv = ["--config".to_owned(), config.display().to_string()];
    let log = verge.dir.join("logs/edgecore.log");
    let pid = verge_testkit::daemon::spawn_detached(&exe, &argv, &[], &log)?;
    std::fs::write(&pids_file, pids.replace(&line, &format!("edgecore {pid}")))?;
    // The Node stays Ready through a short restart; give the new edgecore time to connect
    // and sync before its memory is sampled.
    tokio::time::sleep(Duration::from_secs(10)).await;
    verge.wait_ready(cp, Duration::from_secs(60)).await?;
    Ok(pid)
}

/// `n` pods on the node (busybox `sleep`, restartPolicy Always), Running; each with its
/// container's docker id.
async fn create_pods(admin: &kube::Client, n: usize) -> anyhow::Result<Vec<(Pod, String)>> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), namespace());
    for i in 0..n {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("p{i:03}"), "labels": { "app": "bench" } },
            "spec": { "nodeName": NODE, "terminationGracePeriodSeconds": 1,
                "containers": [{ "name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                    "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
        }))?;
        api.create(&PostParams::default(), &pod).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60 + 3 * n as u64);
    loop {
        let listed = api.list(&Default::default()).await?.items;
        let running: Vec<(Pod, String)> = listed
            .into_iter()
            .filter_map(|p| {
                let status = p.status.as_ref()?;
                if status.phase.as_deref() != Some("Running") {
                    return None;
                }
                let id = status
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .container_id
                    .clone()?;
                Some((p, id.trim_start_matches("docker://").to_owned()))
            })
            .collect();
        if running.len() == n {
            return Ok(running);
        }
        if Instant::now() > deadline {
            bail!("{} of {n} pods Running in time", running.len());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `n` small ConfigMaps `c00000`…, 16 requests in flight.
async fn create_configmaps(admin: &kube::Client, n: usize) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace());
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": { "name": format!("c{i:05}") }, "data": { "value": i.to_string() }
                }))?;
                api.create(&PostParams::default(), &cm).await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// A GET of each of the `n` ConfigMaps through the edge API (8 in flight) and their list:
/// the answers the edge API keeps.
async fn fill_cache(edge: &kube::Client, n: usize) -> anyhow::Result<()> {
    let base = format!("/api/v1/namespaces/{}/configmaps", namespace());
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let (edge, path) = (edge.clone(), format!("{base}/c{i:05}"));
            async move {
                edge.request_text(http::Request::get(&path).body(Vec::new())?)
                    .await
                    .with_context(|| format!("GET {path}"))?;
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<()>>()?;
    edge.request_text(http::Request::get(&base).body(Vec::new())?)
        .await?;
    Ok(())
}

/// Kills the node's cloudhub (SIGKILL): the link is gone.
fn cut_link(verge: &local::LocalVerge) -> anyhow::Result<()> {
    let pids = std::fs::read_to_string(verge.dir.join("pids"))?;
    let pid: u32 = pids
        .lines()
        .find_map(|l| l.strip_prefix("cloudhub "))
        .and_then(|p| p.trim().parse().ok())
        .context("no cloudhub in the pids file")?;
    verge_testkit::daemon::signal_group(pid, "KILL");
    Ok(())
}

/// Waits until the edge API answers a write with its offline 503.
async fn wait_offline(edge: &kube::Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let api: Api<ConfigMap> = Api::namespaced(edge.clone(), namespace());
    let probe: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "offline-probe" } }))?;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&PostParams::default(), &probe),
        )
        .await;
        match answer {
            Ok(Err(kube::Error::Api(s))) if s.code == 503 && s.message.contains("link") => {
                return Ok(());
            }
            other if Instant::now() > deadline => {
                bail!("the edge API never answered offline; last: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
