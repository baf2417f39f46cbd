//! `cargo xtask bench reconnect`: N simulated edge nodes (tonic clients in this process, each
//! holding `OBJECTS_PER_NODE` objects) reconnect to a real cloudhub + edgecontroller at once;
//! prints the time until every node is resynced, the object messages sent per node when
//! nothing changed (goal: 0, only the inventory goes up) and cloudhub's peak resident memory.
//!
//! Two phases, both on the real control plane:
//! 1. cold: every node connects with an empty inventory and receives its objects;
//! 2. measured: every stream is dropped, then all N reconnect at once with their full
//!    inventories. A node is resynced when it received the `resync` end marker
//!    (docs/protocol.md); without markers (an edgecontroller that does not send them) the
//!    phase ends when every node holds its objects and no object message arrived for 2 s.
//!
//! Layout: [`objects`] (the API objects), [`edge`] (one simulated edge node).

mod edge;
mod objects;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::sync::{mpsc, watch};
use tonic::transport::{Channel, Endpoint};
use verge_testkit::{ControlPlane, ControlPlaneConfig, daemon};

use self::edge::{Event, PhaseShared, SessionStats, SimEdge};
use self::objects::OBJECTS_PER_NODE;
use super::percentile;
use crate::local::{self, free_port, status_kib, wait_for_port, write};

/// Arguments of `cargo xtask bench reconnect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of simulated edge nodes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// HTTP/2 connections the simulated nodes share; 0: one connection per node (as real
    /// edges have).
    #[arg(long, default_value_t = 0)]
    pub connections: usize,
    /// Overall time limit, in seconds (setup included).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Skip the cold phase: the nodes start with inventories built from the API objects, so
    /// cloudhub's peak memory is that of the reconnect alone.
    #[arg(long)]
    pub warm_only: bool,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

/// How long the benchmark Nodes must stay unchanged before the phases start (they are made
/// Ready and get Leases, see [`objects::heartbeat`]).
const SETTLE_QUIET: Duration = Duration::from_secs(10);
/// The longest wait for that.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// Quiet time that ends a phase when the edgecontroller sends no `resync` markers.
const QUIET: Duration = Duration::from_secs(2);

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.nodes.max(1);
    let run_dir = verge_testkit::paths::run_dir().join("bench-reconnect");
    // The kit's 10 s node-monitor grace period (fast NotReady for tests) is as short as the
    // simulated nodes' 10 s Lease renewal; the bench uses the Kubernetes default of 40 s.
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        node_monitor_grace_period: Duration::from_secs(40),
        ..ControlPlaneConfig::from_env()
    };
    // A fresh control plane: objects of an interrupted run would collide.
    local::stop_processes(&run_dir);
    crate::control_plane::down(&config).await?;
    let limit = Duration::from_secs(args.timeout);
    let result = tokio::time::timeout(limit, async {
        let cp = crate::control_plane::up(&config).await?;
        let bin_dir = local::build_bins(!args.debug)?;
        measure(&cp, &run_dir, &bin_dir, n, &args).await
    })
    .await
    .unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "bench reconnect did not finish within {limit:?} (--timeout); logs in {}",
            run_dir.join("logs").display()
        ))
    });
    local::stop_processes(&run_dir);
    crate::control_plane::down(&config).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The cloud processes under test.
struct Services {
    cloudhub: u32,
    edgecontroller: u32,
    edge_url: String,
}

async fn measure(
    cp: &ControlPlane,
    run_dir: &Path,
    bin_dir: &Path,
    n: usize,
    args: &Args,
) -> anyhow::Result<()> {
    let connections = args.connections;
    let client = cp.client().await?;
    eprintln!(
        "creating {n} edge nodes, {n} pods and {} configmaps",
        objects::CONFIGMAPS
    );
    let setup = objects::create(&client, n).await?;
    let heartbeat = objects::heartbeat(&client, n).await?;
    eprintln!(
        "  setup took {setup:.1?}; waiting until kube-controller-manager stops editing the nodes"
    );
    let (settled, quiet) = objects::settle_nodes(&client, SETTLE_QUIET, SETTLE_LIMIT).await?;
    if quiet {
        eprintln!("  nodes unchanged for {SETTLE_QUIET:?} after {settled:.1?}");
    } else {
        eprintln!("  warning: nodes still changing after {settled:.1?}; measuring anyway");
    }

    let services = start_services(run_dir, bin_dir, cp).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = (
        status_kib(services.cloudhub, "VmRSS").unwrap_or(0),
        status_kib(services.edgecontroller, "VmRSS").unwrap_or(0),
    );
    let sampler = RssSampler::start(&services);

    let endpoint = Endpoint::from_shared(services.edge_url.clone())?
        .connect_timeout(Duration::from_secs(20))
        .tcp_nodelay(true);
    let mut edges: Vec<SimEdge> = (0..n)
        .map(|i| SimEdge::new(i, objects::node_name(i)))
        .collect();

    let (cold, markers) = if args.warm_only {
        objects::fill_inventories(&client, &mut edges).await?;
        (None, None)
    } else {
        eprintln!("phase 1 (cold): {n} nodes connect with empty inventories");
        let cold = phase(&endpoint, connections, edges, None).await?;
        edges = cold.edges.clone();
        let markers = cold.markers == n;
        eprintln!(
            "  all {n} nodes hold {OBJECTS_PER_NODE} objects after {:.2?} ({})",
            cold.resynced_after,
            if markers {
                "resync markers"
            } else {
                "no resync markers: expected counts + 2 s quiet"
            }
        );
        (Some(cold), Some(markers))
    };
    let cold_rss = sampler.take();

    // Every stream was dropped when phase 1 stopped; let cloudhub and edgecontroller see the
    // disconnects before everyone comes back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!("phase 2: {n} nodes reconnect at once with full inventories");
    let warm = phase(&endpoint, connections, edges, markers).await?;
    let markers = warm.markers == n;
    let warm_rss = sampler.take();
    let hwm = (
        status_kib(services.cloudhub, "VmHWM").unwrap_or(0),
        status_kib(services.edgecontroller, "VmHWM").unwrap_or(0),
    );
    sampler.stop();
    heartbeat.abort();

    let table = Report {
        n,
        connections,
        setup,
        settled,
        quiet,
        cold: cold.as_ref(),
        warm: &warm,
        markers,
        idle,
        cold_rss,
        warm_rss,
        hwm,
    }
    .render();
    println!("{table}");
    let held_wrong = warm
        .stats
        .iter()
        .filter(|s| s.held_at_end != OBJECTS_PER_NODE)
        .count();
    if held_wrong > 0 {
        bail!("{held_wrong} nodes do not hold {OBJECTS_PER_NODE} objects after phase 2");
    }
    super::record::write(
        "reconnect",
        "reconnect: N edge nodes resync by inventory at once",
        &table,
    )
}

/// Starts cloudhub and edgecontroller (no edgecore) detached from `bin_dir` with their
/// shipped defaults, and waits until edgecontroller attached and listed its caches.
async fn start_services(dir: &Path, bin_dir: &Path, cp: &ControlPlane) -> anyhow::Result<Services> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let edge_port = free_port()?;
    let ctrl_port = free_port()?;
    // Shipped defaults: only the listen addresses and the cloudhub address are set.
    let cloudhub_cfg = write(
        dir,
        "cloudhub.yaml",
        &format!("edge_addr: 127.0.0.1:{edge_port}\ncontroller_addr: 127.0.0.1:{ctrl_port}\n"),
    )?;
    let ctrl_cfg = write(
        dir,
        "edgecontroller.yaml",
        &format!("cloudhub: http://127.0.0.1:{ctrl_port}\n"),
    )?;
    let mut pids = Vec::new();
    let mut started = Vec::new();
    for (name, argv) in [
        ("cloudhub", vec!["--config".to_owned(), cloudhub_cfg]),
        (
            "edgecontroller",
            vec![
                "--config".to_owned(),
                ctrl_cfg,
                "--kubeconfig".to_owned(),
                cp.kubeconfig().display().to_string(),
            ],
        ),
    ] {
        let log = dir.join("logs").join(format!("{name}.log"));
        let _ = std::fs::remove_file(&log);
        let pid = daemon::spawn_detached(&bin_dir.join(name), &argv, &[], &log)?;
        eprintln!("  {name} pid {pid}, log {}", log.display());
        pids.push(format!("{name} {pid}"));
        std::fs::write(dir.join("pids"), pids.join("\n") + "\n")?;
        started.push((pid, log));
        if name == "cloudhub" {
            wait_for_port(edge_port, Duration::from_secs(20)).await?;
        }
    }
    let (ctrl_pid, ctrl_log) = &started[1];
    wait_log(
        *ctrl_pid,
        ctrl_log,
        &["attached to cloudhub", "caches synced"],
        Duration::from_secs(120),
    )
    .await?;
    Ok(Services {
        cloudhub: started[0].0,
        edgecontroller: *ctrl_pid,
        edge_url: format!("http://127.0.0.1:{edge_port}"),
    })
}

/// The outcome of one phase.
struct Phase {
    edges: Vec<SimEdge>,
    stats: Vec<SessionStats>,
    /// Time until every node was resynced (marker, or the fallback's last object message).
    resynced_after: Duration,
    /// Per node, the time to its marker (or to holding its objects, in the fallback).
    per_node: Vec<Duration>,
    /// Nodes that received the marker.
    markers: usize,
}

/// Connects every node in `edges` at once and waits until all are resynced. `markers`:
/// `Some(true)` requires the `resync` marker of every node, `Some(false)` uses the quiet
/// fallback, `None` decides by whether any marker arrives (phase 1).
async fn phase(
    endpoint: &Endpoint,
    connections: usize,
    edges: Vec<SimEdge>,
    markers: Option<bool>,
) -> anyhow::Result<Phase> {
    let n = edges.len();
    let channels: Vec<Channel> = if connections == 0 {
        Vec::new()
    } else {
        (0..connections).map(|_| endpoint.connect_lazy()).collect()
    };
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(PhaseShared {
        t0: Instant::now(),
        expected: OBJECTS_PER_NODE,
        last_object_ns: AtomicU64::new(0),
        events: events_tx,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks: Vec<_> = edges
        .into_iter()
        .map(|e| {
            let channel = if channels.is_empty() {
                endpoint.connect_lazy()
            } else {
                channels[e.index % channels.len()].clone()
            };
            tokio::spawn(edge::session(e, channel, shared.clone(), stop_rx.clone()))
        })
        .collect();
    drop(channels);

    let mut complete = vec![None; n];
    let mut marked = vec![None; n];
    let (mut n_complete, mut n_marked) = (0, 0);
    let mut failure = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last_progress = Instant::now();
    let done = loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Complete(i, at)) => {
                    if complete[i].replace(at).is_none() { n_complete += 1; }
                }
                Some(Event::Marker(i, at)) => {
                    if marked[i].replace(at).is_none() { n_marked += 1; }
                }
                Some(Event::Failed(reason)) => { failure = Some(reason); break false; }
                None => break false,
            },
            _ = tick.tick() => {
                if last_progress.elapsed() > Duration::from_secs(5) {
                    eprintln!("  ... {n_complete}/{n} nodes hold their objects, {n_marked}/{n} markers");
                    last_progress = Instant::now();
                }
            },
        }
        let last_object = Duration::from_nanos(shared.last_object_ns.load(Ordering::Relaxed));
        let quiet = shared.t0.elapsed().saturating_sub(last_object) >= QUIET;
        let need_markers = markers.unwrap_or(n_marked > 0);
        if n_complete == n && (if need_markers { n_marked == n } else { quiet }) {
            break true;
        }
    };
    stop_tx.send_replace(true);
    let mut out_edges = Vec::with_capacity(n);
    let mut stats = Vec::with_capacity(n);
    for task in tasks {
        let (e, s) = task.await.context("simulated edge task panicked")?;
        out_edges.push(e);
        stats.push(s);
    }
    if !done {
        bail!(
            "a simulated edge failed: {}",
            failure.unwrap_or_else(|| "event channel closed".into())
        );
    }
    let with_markers = n_marked == n;
    let per_node: Vec<Duration> = if with_markers {
        marked.into_iter().flatten().collect()
    } else {
        complete.into_iter().flatten().collect()
    };
    let last_object = Duration::from_nanos(shared.last_object_ns.load(Ordering::Relaxed));
    let resynced_after = per_node
        .iter()
        .copied()
        .max()
        .unwrap_or_default()
        .max(if with_markers {
            Duration::ZERO
        } else {
            last_object
        });
    let mut per_node = per_node;
    per_node.sort();
    Ok(Phase {
        edges: out_edges,
        stats,
        resynced_after,
        per_node,
        markers: n_marked,
    })
}

/// Peak VmRSS samples (KiB) of cloudhub and edgecontroller, every 100 ms.
struct RssSampler {
    peaks: Arc<[AtomicU64; 2]>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(services: &Services) -> Self {
        let peaks = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let pids = [services.cloudhub, services.edgecontroller];
        let task = tokio::spawn({
            let peaks = peaks.clone();
            async move {
                loop {
                    for (peak, pid) in peaks.iter().zip(pids) {
                        if let Some(kib) = status_kib(pid, "VmRSS") {
                            peak.fetch_max(kib, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self { peaks, task }
    }

    /// The peaks since the last call (cloudhub, edgecontroller), resetting them.
    fn take(&self) -> (u64, u64) {
        (
            self.peaks[0].swap(0, Ordering::Relaxed),
            self.peaks[1].swap(0, Ordering::Relaxed),
        )
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// Everything one run measured.
struct Report<'a> {
    n: usize,
    connections: usize,
    setup: Duration,
    /// Time until kube-controller-manager stopped editing the Nodes.
    settled: Duration,
    /// Whether the Nodes stopped changing before the phases.
    quiet: bool,
    cold: Option<&'a Phase>,
    warm: &'a Phase,
    markers: bool,
    /// Idle RSS (KiB) of cloudhub and edgecontroller.
    idle: (u64, u64),
    /// Peak RSS (KiB) during the cold phase.
    cold_rss: (u64, u64),
    /// Peak RSS (KiB) during the reconnect.
    warm_rss: (u64, u64),
    /// VmHWM (KiB) at the end.
    hwm: (u64, u64),
}

impl Report<'_> {
    /// The result as Markdown (printed, and written to `docs/benchmarks.md`).
    fn render(&self) -> String {
        use std::fmt::Write as _;
        let n = self.n;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let conns = if self.connections == 0 {
            format!("{n} HTTP/2 connections (one per node)")
        } else {
            format!("{} shared HTTP/2 connections", self.connections)
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{n} simulated edge nodes, each holding {OBJECTS_PER_NODE} objects (its Node, 1 pod, \
             {} configmaps), {conns}; real cloudhub and edgecontroller (release) with their \
             shipped defaults (no queue or limit overridden) on the real control plane. API \
             setup ({n} nodes made Ready with renewed Leases, {n} pods, {} configmaps): {:.1?}, \
             then {:.1?} {}. Resync detected by: {}.\n",
            objects::CONFIGMAPS,
            objects::CONFIGMAPS,
            self.setup,
            self.settled,
            if self.quiet {
                format!(
                    "until kube-controller-manager stopped editing the Nodes ({SETTLE_QUIET:?} unchanged)"
                )
            } else {
                "waiting for the Nodes to stop changing: they did NOT (object messages below include real Node changes)".to_owned()
            },
            if self.markers {
                "the `resync` end marker of every node"
            } else {
                "NO resync markers: expected object counts + 2 s without object messages"
            }
        );
        out.push_str(
            "| phase | all resynced after | per node p50 | per node p99 | object messages per \
             node (min / avg / max) | of which redundant | hello (inventory) max | error answers \
             | connect retries |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        let phases = self
            .cold
            .map(|c| ("cold (empty inventory)", c))
            .into_iter()
            .chain([("reconnect (full inventory)", self.warm)]);
        for (name, p) in phases {
            let objects: Vec<u64> = p.stats.iter().map(SessionStats::objects).collect();
            let total: u64 = objects.iter().sum();
            let min = objects.iter().copied().min().unwrap_or(0);
            let max = objects.iter().copied().max().unwrap_or(0);
            let errors: u64 = p.stats.iter().map(|s| s.errors).sum();
            let retries: u32 = p.stats.iter().map(|s| s.attempts.saturating_sub(1)).sum();
            let hello = p.stats.iter().map(|s| s.hello_bytes).max().unwrap_or(0);
            let redundant: u64 = p.stats.iter().map(|s| s.redundant).sum();
            let _ = writeln!(
                out,
                "| {name} | {:.2?} | {:.2?} | {:.2?} | {min} / {:.1} / {max} | {redundant} | \
                 {hello} B | {errors} | {retries} |",
                p.resynced_after,
                percentile(&p.per_node, 50),
                percentile(&p.per_node, 99),
                total as f64 / n as f64,
            );
        }
        for (name, p) in self
            .cold
            .map(|c| ("cold", c))
            .into_iter()
            .chain([("reconnect", self.warm)])
        {
            let mut by_type = std::collections::BTreeMap::<&str, u64>::new();
            for s in &p.stats {
                for (kind, n) in &s.by_type {
                    *by_type.entry(kind).or_default() += n;
                }
            }
            let list: Vec<String> = by_type.iter().map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(
                out,
                "\nObject messages by type, {name}: {}.",
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            );
        }
        let cold_peak = |kib: u64| {
            self.cold
                .map_or_else(|| "skipped".to_owned(), |_| format!("{:.1} MiB", mib(kib)))
        };
        let _ = writeln!(
            out,
            "\n| process | RSS idle | peak cold | peak reconnect | VmHWM |\n|---|---|---|---|---|"
        );
        for (name, idle, cold, warm, hwm) in [
            (
                "cloudhub",
                self.idle.0,
                self.cold_rss.0,
                self.warm_rss.0,
                self.hwm.0,
            ),
            (
                "edgecontroller",
                self.idle.1,
                self.cold_rss.1,
                self.warm_rss.1,
                self.hwm.1,
            ),
        ] {
            let _ = writeln!(
                out,
                "| {name} | {:.1} MiB | {} | {:.1} MiB | {:.1} MiB |",
                mib(idle),
                cold_peak(cold),
                mib(warm),
                mib(hwm)
            );
        }
        out
    }
}

/// Waits until `log` contains every one of `needles`, failing when `pid` exits.
async fn wait_log(pid: u32, log: &Path, needles: &[&str], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if needles.iter().all(|n| text.contains(n)) {
            return Ok(());
        }
        if !daemon::is_alive(pid, None) {
            bail!(
                "pid {pid} exited ({}); log tail:\n{}",
                daemon::describe_exit(pid),
                verge_testkit::process::log_tail(log, 30)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{} never logged {needles:?} within {timeout:?}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
