//! `cargo xtask bench scale`: N hollow edge nodes (one process, one mutual-TLS connection
//! each, see [`hollow`]) on one real cloudhub + edgecontroller (release builds, shipped
//! defaults) and the real control plane. Measures:
//! 1. connect: all N connect at once with empty inventories; time until every node received
//!    its `resync` marker (each gets its Node);
//! 2. steady state: cloudhub's and edgecontroller's RSS, CPU and file descriptors with N idle
//!    sessions over `--idle` seconds, and the bytes each node moves per minute in each
//!    direction (keepalives, acks, its status report every `--status-period`);
//! 3. downstream under that load: `--probes` pods created one at a time, each bound to another
//!    node, from the create call until the hollow edge holds it (p50/p99); then
//!    `--secret-probes` pods each mounting a Secret of its own, until the edge holds the Secret
//!    (edgecontroller watches each referenced Secret as a node using it: the cost of its
//!    node-scoped access), and edgecontroller's RSS with those watches open;
//! 4. reconnect storm: every stream dropped, then all N reconnect at once with their
//!    inventories; time until all are resynced and the object messages each received (goal 0).
//!
//! The Nodes are created by the benchmark (no registration writes), and kube-controller-manager
//! runs without its node lifecycle and TTL controllers: nothing renews the hollow nodes' Leases
//! (10,000 renewals every 10 s are 1,000 API writes/s, more than this machine's API server
//! takes beside the benchmark), so those controllers would taint and annotate every Node and
//! each such edit would be a real change sent down. Nor does it run its node IPAM controller
//! (thousands of Nodes would exhaust the pod CIDRs it allocates).
//!
//! Layout: [`hollow`] (the simulated nodes), [`wire`] (their counted TLS connections),
//! [`proc`] (CPU, file descriptors), [`report`] (the tables and targets).

pub(super) mod hollow;
pub(super) mod proc;
mod report;
pub(super) mod wire;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use verge_testkit::{ControlPlane, ControlPlaneConfig};

use self::hollow::{Event, Hollow, Phase, Shared};
use self::report::{Report, Snapshot, StormFigures};
use super::reconnect::objects::{create_all, node_name};
use super::reconnect::{Services, node_credentials, start_services};
use crate::local::{self, status_kib};

/// Arguments of `cargo xtask bench scale`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of hollow edge nodes (sessions on one cloudhub).
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    /// Seconds of steady state over which memory, CPU and idle traffic are measured.
    #[arg(long, default_value_t = 60)]
    pub idle: u64,
    /// Pods created one at a time under load for the downstream latency.
    #[arg(long, default_value_t = 100)]
    pub probes: usize,
    /// Pods created one at a time, each mounting a Secret of its own, for the cost of
    /// edgecontroller's node-scoped Secret watches.
    #[arg(long, default_value_t = 100)]
    pub secret_probes: usize,
    /// Seconds between a hollow node's status reports (edgecore's
    /// `nodeStatusReportFrequency`).
    #[arg(long, default_value_t = 300)]
    pub status_period: u64,
    /// Overall time limit, in seconds (setup included).
    #[arg(long, default_value_t = 2400)]
    pub timeout: u64,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

/// The namespace of the probe pods.
const NAMESPACE: &str = "verge-bench-scale";
/// The longest wait for all nodes to resync in one phase.
const RESYNC_LIMIT: Duration = Duration::from_secs(600);
/// Quiet time after the connect phase before the steady state is measured.
const SETTLE: Duration = Duration::from_secs(15);

/// Runs the benchmark. The hollow edges run in this process, so a debug xtask (what `cargo
/// xtask` runs) hands over to the release build of itself: 10,000 TLS clients in unoptimised
/// code would bound the storms instead of cloudhub.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(code) = super::env::in_release("scale")? {
        return Ok(code);
    }
    // Each hollow edge holds a socket.
    let fd_limit = verge_runtime::limits::raise_open_files()
        .context("raising the open-file limit")?
        .1
        .unwrap_or(u64::MAX);
    let n = args.nodes.max(1);
    if fd_limit < n as u64 + 512 {
        bail!("open-file limit {fd_limit} is too low for {n} connections (ulimit -Hn)");
    }
    let run_dir = verge_testkit::paths::run_dir().join("bench-scale");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        disabled_controllers: vec![
            "node-lifecycle-controller".to_owned(),
            "ttl-controller".to_owned(),
            // Node pod-CIDR allocation: thousands of hollow Nodes would exhaust the
            // cluster CIDR's 256 /24s.
            "node-ipam-controller".to_owned(),
        ],
        ..ControlPlaneConfig::from_env()
    };
    super::env::on_fresh_control_plane(
        "scale",
        &config,
        &run_dir,
        Duration::from_secs(args.timeout),
        !args.debug,
        async |cp, bin_dir| measure(cp, &run_dir, bin_dir, n, &args).await,
    )
    .await
}

async fn measure(
    cp: &ControlPlane,
    run_dir: &Path,
    bin_dir: &Path,
    n: usize,
    args: &Args,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    let started = Instant::now();
    eprintln!("creating {n} edge Nodes");
    local::create_namespace(&client, NAMESPACE).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    create_all(&nodes, (0..n).map(node)).await?;
    let setup = started.elapsed();
    eprintln!("  {n} Nodes created in {setup:.1?}");

    let services = start_services(run_dir, bin_dir, cp).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = Snapshot::take(&services);

    eprintln!("issuing {n} node certificates from the Verge CA");
    let credentials = node_credentials(&client, n).await?;
    let endpoint = verge_proto::transport::endpoint(&services.edge_url)?
        .connect_timeout(Duration::from_secs(30))
        .tcp_nodelay(true);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        endpoint,
        bytes: Arc::default(),
        objects: (0..n).map(|_| AtomicU64::new(0)).collect(),
        redundant: (0..n).map(|_| AtomicU64::new(0)).collect(),
        reconnects: AtomicU64::new(0),
        connect_failures: AtomicU64::new(0),
        status_reports: AtomicU64::new(0),
        status_period: Duration::from_secs(args.status_period.max(1)),
        events: events_tx,
        first_error: wire::FirstError::default(),
    });
    let (phase_tx, phase_rx) = watch::channel(Phase::Dropped);
    let status = hollow::status_json();
    let tasks: Vec<_> = credentials
        .iter()
        .enumerate()
        .map(|(i, tls)| {
            let node = Hollow::new(i, node_name(i), tls, status.clone());
            tokio::spawn(node.run(shared.clone(), phase_rx.clone()))
        })
        .collect();
    drop(credentials);

    eprintln!("phase 1: {n} hollow edges connect at once");
    let connect = storm(&shared, &phase_tx, &mut events, 1, &services, n).await?;
    eprintln!("  all resynced after {:.2?}", connect.all_after);
    tokio::time::sleep(SETTLE).await;

    let idle = Duration::from_secs(args.idle);
    eprintln!("phase 2: steady state with {n} idle sessions for {idle:?}");
    let steady_start = Snapshot::take(&services);
    let bytes_start = shared.bytes.read();
    shared.status_reports.store(0, Ordering::Relaxed);
    tokio::time::sleep(idle).await;
    let steady_end = Snapshot::take(&services);
    let bytes_end = shared.bytes.read();
    let status_reports = shared.status_reports.load(Ordering::Relaxed);

    eprintln!(
        "phase 3: {} pods created one at a time under load",
        args.probes
    );
    let probes = probe(&client, &mut events, n, args.probes, false).await?;
    eprintln!(
        "phase 3b: {} pods with a Secret of their own, one at a time",
        args.secret_probes
    );
    let before_secrets = Snapshot::take(&services);
    let secret_probes = probe(&client, &mut events, n, args.secret_probes, true).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let secret_watches = (before_secrets, Snapshot::take(&services));

    eprintln!("phase 4: every stream dropped, then all {n} reconnect at once");
    shared.reset();
    phase_tx.send_replace(Phase::Dropped);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let dropped = Snapshot::take(&services);
    let reconnect = storm(&shared, &phase_tx, &mut events, 2, &services, n).await?;
    eprintln!("  all resynced after {:.2?}", reconnect.all_after);
    let after = Snapshot::take(&services);
    phase_tx.send_replace(Phase::Stop);
    for task in tasks {
        task.abort();
    }

    let first_error = shared.first_error.get();
    let table = Report {
        n,
        build: if args.debug { "debug" } else { "release" },
        setup,
        idle,
        status_period: shared.status_period,
        before,
        steady: (steady_start, steady_end),
        bytes: (bytes_end.0 - bytes_start.0, bytes_end.1 - bytes_start.1),
        status_reports,
        connect,
        probes,
        secret_probes,
        secret_watches,
        dropped,
        reconnect,
        after,
        first_error,
    }
    .render();
    println!("{table}");
    super::record::write(
        "scale",
        "scale: N hollow edge nodes on one cloudhub",
        &table,
    )
}

/// Moves every node to session `epoch` at once and waits until all received their
/// `resync` marker; returns the figures of that storm.
async fn storm(
    shared: &Shared,
    phase: &watch::Sender<Phase>,
    events: &mut mpsc::UnboundedReceiver<Event>,
    epoch: u64,
    services: &Services,
    n: usize,
) -> anyhow::Result<StormFigures> {
    let rss_peak = Arc::new(AtomicU64::new(0));
    let sampler = tokio::spawn({
        let (peak, pid) = (rss_peak.clone(), services.cloudhub);
        async move {
            loop {
                if let Some(kib) = status_kib(pid, "VmRSS") {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let watched = proc::watched(services.cloudhub, services.edgecontroller);
    let cpu_start = proc::cpu_of(&watched);
    let t0 = Instant::now();
    phase.send_replace(Phase::Connected(epoch));
    let mut resynced: Vec<Option<Duration>> = vec![None; n];
    let mut done = 0;
    let mut progress = Instant::now();
    while done < n {
        let event = tokio::time::timeout(Duration::from_secs(1), events.recv()).await;
        match event {
            Ok(Some(Event::Resynced(i, at))) if resynced[i].is_none() => {
                resynced[i] = Some(at.saturating_duration_since(t0));
                done += 1;
            }
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => bail!("every hollow edge stopped"),
        }
        if progress.elapsed() >= Duration::from_secs(5) {
            progress = Instant::now();
            eprintln!(
                "  {done}/{n} resynced after {:.0?} ({} reconnects, {} connect failures)",
                t0.elapsed(),
                shared.reconnects.load(Ordering::Relaxed),
                shared.connect_failures.load(Ordering::Relaxed)
            );
        }
        if t0.elapsed() > RESYNC_LIMIT {
            let first = shared.first_error.get();
            bail!(
                "only {done} of {n} nodes resynced within {RESYNC_LIMIT:?}; first error: {}",
                first.unwrap_or_default()
            );
        }
    }
    let all_after = t0.elapsed();
    let cpu = watched
        .iter()
        .zip(proc::cpu_of(&watched).into_iter().zip(cpu_start))
        .map(|((label, _), (end, start))| (*label, end - start))
        .collect();
    sampler.abort();
    let mut per_node: Vec<Duration> = resynced.into_iter().flatten().collect();
    per_node.sort();
    let objects: Vec<u64> = shared
        .objects
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    Ok(StormFigures {
        all_after,
        per_node,
        objects,
        redundant: shared
            .redundant
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum(),
        reconnects: shared.reconnects.load(Ordering::Relaxed),
        connect_failures: shared.connect_failures.load(Ordering::Relaxed),
        cpu,
        cloudhub_peak_kib: rss_peak.load(Ordering::Relaxed),
    })
}

/// Creates `count` pods one at a time, pod `i` bound to a node spread over the `n`; returns
/// per pod (create call → the hollow edge holds it, create call's own duration). With
/// `own_secret`, each pod mounts a Secret of its own, created just before it, and the time is
/// until the hollow edge holds that Secret (the create calls of both are the second figure).
async fn probe(
    client: &kube::Client,
    events: &mut mpsc::UnboundedReceiver<Event>,
    n: usize,
    count: usize,
    own_secret: bool,
) -> anyhow::Result<Vec<(Duration, Duration)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("probe-{}{i:04}", if own_secret { "s-" } else { "" });
        let secret = format!("probe-secret-{i:04}");
        let node = node_name((i * 7919 + if own_secret { 29 } else { 13 }) % n);
        let mut pod = probe_pod(&name, &node);
        let t0 = Instant::now();
        if own_secret {
            pod["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": secret}}]);
            let object: Secret = serde_json::from_value(
                json!({"metadata": {"name": secret}, "stringData": {"key": format!("value {i}")}}),
            )?;
            secrets
                .create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating Secret {secret}"))?;
        }
        let pod: Pod = serde_json::from_value(pod)?;
        let t1 = Instant::now();
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        let calls = t0.elapsed();
        let awaited = if own_secret { &secret } else { &name };
        let at = arrival(events, awaited, t1, &node).await?;
        out.push((at.saturating_duration_since(t1), calls));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(out)
}

/// When a hollow edge got the pod or Secret `name` (within 30 s of `since`), skipping other
/// events.
async fn arrival(
    events: &mut mpsc::UnboundedReceiver<Event>,
    name: &str,
    since: Instant,
    node: &str,
) -> anyhow::Result<Instant> {
    let deadline = since + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Some(Event::Probe(got, at))) if got == name => return Ok(at),
            Ok(Some(_)) => {}
            Ok(None) => bail!("every hollow edge stopped"),
            Err(_) => bail!("{name} did not reach node {node} within 30 s"),
        }
    }
}

fn node(i: usize) -> serde_json::Value {
    json!({
        "metadata": {
            "name": node_name(i),
            "labels": {"node-role.kubernetes.io/edge": "", "verge.io/bench": "scale"}
        }
    })
}

/// A probe pod `name` bound to `node` (no scheduler), tolerating anything.
pub(super) fn probe_pod(name: &str, node: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "main",
                "image": verge_testkit::docker::TEST_IMAGE,
                "command": ["sleep", "3600"]
            }]
        }
    })
}
