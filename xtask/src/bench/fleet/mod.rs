//! `cargo xtask bench fleet`: what a fleet of edge nodes costs the cloud, with hollow edges
//! that speak the whole protocol ([`edge`]) against the cloud as deployed ([`cloud`]: three
//! cloudhub replicas, two edgecontrollers with leader election) on a control plane whose
//! kube-controller-manager runs every controller with upstream's node-monitor timings.
//!
//! Steps of growing fleets ([`Args::steps`]): each adds hollow edges, waits until every Node
//! is Ready, then holds for [`Args::hold`] while a pod is created on a random node every few
//! seconds (the latency of a pod reaching its node under that load) and every Node must stay
//! Ready. The largest step that held gives the per-node costs: CPU seconds per node-hour and
//! resident memory per node of each process, and API server writes per node per minute. At
//! that size the writes are measured again with the node status reported at every
//! `nodeStatusUpdateFrequency` (10 s, what the kubelet did before Leases; edgecore's shipped
//! `nodeStatusReportFrequency` is 5 minutes), then a cloudhub replica is killed (time until
//! its nodes are resynced on the others) and every replica restarted (each edge makes a full
//! TLS handshake: time until all are resynced). The report projects the per-node costs to
//! 100,000 nodes ([`report`]).

mod cloud;
mod edge;
mod report;

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use verge_testkit::{ControlPlane, ControlPlaneConfig};

use self::cloud::Cloud;
use self::edge::{Event, Hollow, Phase, Shared};
use self::report::{Costs, Failover, Report, Step, Writes};
use crate::bench::scale::proc::{cpu_seconds, pids_named};
use crate::local;

/// Arguments of `cargo xtask bench fleet`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fleet sizes held in turn, each adding hollow edges to the running fleet; the run stops
    /// at the first that does not hold.
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000")]
    pub steps: Vec<usize>,
    /// How long each size must keep every Node Ready, seconds.
    #[arg(long, default_value_t = 600)]
    pub hold: u64,
    /// How long each node-status write measurement lasts, seconds.
    #[arg(long, default_value_t = 180)]
    pub writes_window: u64,
    /// Gives up after this many seconds.
    #[arg(long, default_value_t = 3 * 3600)]
    pub timeout: u64,
}

/// The namespace of the probe pods.
const NAMESPACE: &str = "verge-bench-fleet";
/// kubelet's `nodeStatusUpdateFrequency`: how often edgecore looks at its node status.
const STATUS_TICK: Duration = Duration::from_secs(10);
/// edgecore's shipped `nodeStatusReportFrequency`.
const STATUS_REPORT: Duration = Duration::from_secs(300);
/// Longest wait for a step's new nodes to connect and turn Ready.
const READY_LIMIT: Duration = Duration::from_secs(600);
/// How often the Nodes are listed during a hold.
const READY_SAMPLE: Duration = Duration::from_secs(30);
/// A probe pod every this often during a hold.
const PROBE_EVERY: Duration = Duration::from_secs(3);

/// The name of hollow node `i`.
fn node_name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// Runs the benchmark. The hollow edges run in this process, so a debug xtask hands over to
/// the release build of itself, as `bench scale` does.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(code) = super::env::in_release("fleet")? {
        return Ok(code);
    }
    let max = args.steps.iter().copied().max().unwrap_or(0);
    if max == 0 {
        bail!("--steps needs at least one fleet size");
    }
    let fd_limit = verge_runtime::limits::raise_open_files()
        .context("raising the open-file limit")?
        .1
        .unwrap_or(u64::MAX);
    if fd_limit < max as u64 + 512 {
        bail!("open-file limit {fd_limit} is too low for {max} connections (ulimit -Hn)");
    }
    let run_dir = verge_testkit::paths::run_dir().join("bench-fleet");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        // Upstream's node monitoring, every controller on (node-ipam included, so every
        // Node needs a pod range of the cluster CIDR).
        node_monitor_grace_period: Duration::from_secs(50),
        node_monitor_period: Duration::from_secs(5),
        node_cidr_mask_size: node_cidr_mask(max)?,
        ..ControlPlaneConfig::from_env()
    };
    super::env::on_fresh_control_plane(
        "fleet",
        &config,
        &run_dir,
        Duration::from_secs(args.timeout),
        true,
        async |cp, bin_dir| measure(cp, &run_dir, bin_dir, &args).await,
    )
    .await
}

/// The largest fleet the cluster CIDR (a /16) gives a pod range each: 16,384 `/30`s.
const MAX_NODES: usize = 1 << (MAX_NODE_MASK - 16);
/// The narrowest pod range per Node: a `/30` (a gateway and one pod address).
const MAX_NODE_MASK: u8 = 30;

/// kube-controller-manager's `--node-cidr-mask-size` for a fleet of `max` Nodes: the widest
/// pod range per Node (at most the kit's `/24`) of which the `/16` cluster CIDR holds `max`,
/// so that node-ipam gives every hollow Node a `spec.podCIDR` as on a real cluster.
///
/// # Errors
/// `max` is above [`MAX_NODES`].
fn node_cidr_mask(max: usize) -> anyhow::Result<u8> {
    if max > MAX_NODES {
        bail!(
            "--steps goes to {max} nodes; the /16 cluster CIDR holds at most {MAX_NODES} Nodes (a /30 each)"
        );
    }
    let bits = u8::try_from(max.next_power_of_two().trailing_zeros())?;
    Ok((16 + bits).clamp(24, MAX_NODE_MASK))
}

/// The processes whose CPU and memory the report gives: (label, pids).
fn watched(cloud: &Cloud) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = cloud
        .replicas
        .iter()
        .map(|r| (format!("cloudhub {}", r.name), vec![r.pid]))
        .collect();
    out.push(("edgecontroller (leader)".to_owned(), vec![cloud.leader()]));
    for name in [
        "kube-apiserver",
        "etcd",
        "kube-controller",
        "kube-scheduler",
    ] {
        out.push((
            name.replace("kube-controller", "kube-controller-manager"),
            pids_named(name),
        ));
    }
    out.push(("hollow edges (xtask)".to_owned(), vec![std::process::id()]));
    out
}

/// CPU seconds and resident KiB of each watched group now.
fn sample(watched: &[(String, Vec<u32>)]) -> Vec<(f64, u64)> {
    watched
        .iter()
        .map(|(_, pids)| {
            let cpu = pids.iter().filter_map(|&p| cpu_seconds(p)).sum();
            let rss = pids
                .iter()
                .filter_map(|&p| local::status_kib(p, "VmRSS"))
                .sum();
            (cpu, rss)
        })
        .collect()
}

async fn measure(
    cp: &ControlPlane,
    run_dir: &Path,
    bin_dir: &Path,
    args: &Args,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let mut cloud = Cloud::start(run_dir, bin_dir, cp).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let watched = watched(&cloud);
    let idle = sample(&watched);
    let max = args.steps.iter().copied().max().unwrap_or(0);

    eprintln!("bench fleet: issuing {max} node certificates from the Verge CA");
    let ca = verge_testkit::trust::verge_ca(&client).await?;
    let credentials: Vec<rustls::ClientConfig> = (0..max)
        .map(|i| verge_testkit::trust::node_client_config(&ca, &node_name(i)).map(|c| (*c).clone()))
        .collect::<anyhow::Result<_>>()?;
    let endpoints = cloud
        .replicas
        .iter()
        .map(|r| {
            Ok(verge_proto::transport::endpoint(&r.edge_url)?
                .connect_timeout(Duration::from_secs(30))
                .tcp_nodelay(true))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        endpoints,
        bytes: Arc::default(),
        status_tick: STATUS_TICK,
        status_period_ms: AtomicU64::new(STATUS_REPORT.as_millis() as u64),
        resume_tls: std::sync::atomic::AtomicBool::new(true),
        reports: AtomicU64::new(0),
        status_reports: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        reconnects: AtomicU64::new(0),
        events: events_tx,
        first_error: crate::bench::scale::wire::FirstError::default(),
    });
    let (phase_tx, phase_rx) = watch::channel(Phase::Connected(1));
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut tracker = Tracker::default();
    let mut steps: Vec<Step> = Vec::new();
    let mut held: Option<(usize, Costs)> = None;
    let mut not_held: Option<(usize, String)> = None;
    let mut hollows: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut running = 0;
    for &size in &args.steps {
        if size <= running {
            continue;
        }
        eprintln!("bench fleet: growing to {size} hollow edges");
        let grown = Instant::now();
        crate::bench::reconnect::objects::create_all(&nodes, (running..size).map(node_object))
            .await?;
        for (i, tls) in credentials.iter().enumerate().take(size).skip(running) {
            let hollow = Hollow::new(i, node_name(i), tls, cloud.replicas.len());
            hollows.push(tokio::spawn(hollow.run(shared.clone(), phase_rx.clone())));
        }
        running = size;
        let ready_after = match grow(&nodes, &mut events, &mut tracker, size).await {
            Ok(ready) => ready,
            Err(e) => {
                eprintln!("  {size} did not come up: {e:#}");
                not_held = Some((size, format!("{e:#}")));
                break;
            }
        };
        let connected_in = grown.elapsed();
        eprintln!("  {size} connected and Ready after {connected_in:.1?} ({ready_after} Ready)");
        let step = hold(
            args,
            &client,
            &nodes,
            &pods,
            &shared,
            &mut events,
            &mut tracker,
            &watched,
            size,
        )
        .await?;
        let ok = step.min_ready == size && step.errors == 0;
        eprintln!(
            "  held {:?}: min Ready {}/{size}, pod to node p99 {:.0} ms, errors {}",
            Duration::from_secs(args.hold),
            step.min_ready,
            step.probe_p99.as_secs_f64() * 1000.0,
            step.errors
        );
        if ok {
            held = Some((size, step.costs.clone()));
        }
        steps.push(Step {
            connected_in,
            ..step
        });
        if !ok {
            not_held = Some((
                size,
                format!(
                    "{} of {size} Nodes Ready at the fewest, {} errors",
                    step.min_ready, step.errors
                ),
            ));
            break;
        }
    }
    let Some((size, _)) = held.clone() else {
        let first = shared.first_error.get();
        bail!("no fleet size held every Node Ready ({not_held:?}); first error: {first:?}");
    };
    // Only the fleet that held goes on: the nodes of the step that did not leave.
    if running > size {
        eprintln!("bench fleet: back to the {size} nodes that held");
        for hollow in hollows.drain(size..) {
            hollow.abort();
        }
        for i in size..running {
            let _ = nodes.delete(&node_name(i), &DeleteParams::default()).await;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let writes = measure_writes(args, &client, &shared, size).await?;
    let failover = failover(&mut cloud, &shared, &mut events, &mut tracker, size).await?;
    let _ = phase_tx.send(Phase::Stop);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    Report {
        steps,
        not_held,
        held,
        idle: watched.iter().map(|(l, _)| l.clone()).zip(idle).collect(),
        writes,
        failover,
        hold: Duration::from_secs(args.hold),
    }
    .record()
}

/// Waits until the `size` nodes resynced and their Nodes are Ready; returns how many are.
async fn grow(
    nodes: &Api<Node>,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    size: usize,
) -> anyhow::Result<usize> {
    tracker
        .wait(
            events,
            |t| (0..size).all(|i| t.last.contains_key(&i)),
            READY_LIMIT,
        )
        .await
        .with_context(|| format!("{size} nodes did not resync"))?;
    wait_all_ready(nodes, size, READY_LIMIT).await
}

/// Node `i` as join creates it: an edge node (the label cloudhub and edgecontroller check).
fn node_object(i: usize) -> serde_json::Value {
    json!({"metadata": {"name": node_name(i), "labels": {
        "node-role.kubernetes.io/edge": "", "verge.io/bench": "fleet"}}})
}

/// The newest resync of each node and its replica, from the hollow edges' events; probe
/// arrivals by pod name.
#[derive(Debug, Default)]
struct Tracker {
    last: HashMap<usize, (usize, Instant)>,
    probes: HashMap<String, Instant>,
}

impl Tracker {
    fn take(&mut self, event: Event) {
        match event {
            Event::Resynced { index, replica, at } => {
                self.last.insert(index, (replica, at));
            }
            Event::Probe(name, at) => {
                self.probes.insert(name, at);
            }
        }
    }

    /// Takes events until `done` holds, at most `limit`.
    async fn wait(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        done: impl Fn(&Self) -> bool,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        while !done(self) {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => self.take(event),
                Ok(None) => bail!("the hollow edges are gone"),
                Err(_) => bail!("not within {limit:?}"),
            }
        }
        while let Ok(event) = events.try_recv() {
            self.take(event);
        }
        Ok(())
    }
}

/// How many bench Nodes are Ready.
async fn ready_count(nodes: &Api<Node>) -> anyhow::Result<usize> {
    let listed = nodes
        .list(&ListParams::default().labels("verge.io/bench=fleet"))
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|n| verge_testkit::wait::ready_status(n).as_deref() == Some("True"))
        .count())
}

/// Waits until `size` bench Nodes are Ready; returns how many are.
async fn wait_all_ready(nodes: &Api<Node>, size: usize, limit: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + limit;
    loop {
        let ready = ready_count(nodes).await?;
        if ready >= size {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            bail!("{ready} of {size} Nodes Ready after {limit:?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The counters of the API server's writes (`apiserver_request_total` of verbs that write),
/// by resource.
async fn api_writes(client: &kube::Client) -> anyhow::Result<HashMap<String, f64>> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut out: HashMap<String, f64> = HashMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(&line[start..end])
        };
        let verb = label("verb").unwrap_or_default();
        if !matches!(verb, "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY") {
            continue;
        }
        let resource = match label("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", label("resource").unwrap_or_default()),
            None => label("resource").unwrap_or_default().to_owned(),
        };
        let value: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(resource).or_default() += value;
    }
    Ok(out)
}

/// Writes per node per minute between two [`api_writes`] readings `span` apart.
fn per_node_minute(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
    size: usize,
    span: Duration,
) -> Vec<(String, f64)> {
    let minutes = span.as_secs_f64() / 60.0;
    let mut out: Vec<(String, f64)> = after
        .iter()
        .map(|(resource, v)| {
            let delta = v - before.get(resource).copied().unwrap_or(0.0);
            (resource.clone(), delta / size as f64 / minutes)
        })
        .filter(|(_, rate)| *rate > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// One hold: every Node must stay Ready for [`Args::hold`] while probe pods go out.
#[allow(clippy::too_many_arguments)]
async fn hold(
    args: &Args,
    client: &kube::Client,
    nodes: &Api<Node>,
    pods: &Api<Pod>,
    shared: &Shared,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    watched: &[(String, Vec<u32>)],
    size: usize,
) -> anyhow::Result<Step> {
    let span = Duration::from_secs(args.hold);
    let (start, writes_before) = (sample(watched), api_writes(client).await?);
    let errors_before = shared.errors.load(Ordering::Relaxed);
    let began = Instant::now();
    let mut min_ready = size;
    let mut created: Vec<(String, Instant)> = Vec::new();
    let mut next_sample = began;
    let mut probe = 0usize;
    while began.elapsed() < span {
        if Instant::now() >= next_sample {
            min_ready = min_ready.min(ready_count(nodes).await?);
            next_sample += READY_SAMPLE;
        }
        let name = format!("probe-{size}-{probe}");
        // Spread over the fleet: a stride coprime with any size that is not a multiple of 7.
        let node = node_name((probe * 7919) % size);
        let pod: Pod = serde_json::from_value(crate::bench::scale::probe_pod(&name, &node))?;
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &pod).await?;
        created.push((name, t0));
        probe += 1;
        let until = tokio::time::Instant::now() + PROBE_EVERY;
        while let Ok(Some(event)) = tokio::time::timeout_at(until, events.recv()).await {
            tracker.take(event);
        }
    }
    let elapsed = began.elapsed();
    let (end, writes_after) = (sample(watched), api_writes(client).await?);
    min_ready = min_ready.min(ready_count(nodes).await?);
    // The last probes may still be on their way.
    let _ = tracker
        .wait(
            events,
            |t| created.iter().all(|(n, _)| t.probes.contains_key(n)),
            Duration::from_secs(30),
        )
        .await;
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(n, t0)| Some(tracker.probes.get(n)?.saturating_duration_since(*t0)))
        .collect();
    latencies.sort();
    let lost = created.len() - latencies.len();
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let costs = Costs {
        size,
        cpu_per_node_hour: start
            .iter()
            .zip(&end)
            .map(|((a, _), (b, _))| (b - a) / elapsed.as_secs_f64() * 3600.0 / size as f64)
            .collect(),
        rss_kib: end.iter().map(|(_, rss)| *rss).collect(),
        writes: per_node_minute(&writes_before, &writes_after, size, elapsed),
    };
    Ok(Step {
        size,
        connected_in: Duration::ZERO,
        min_ready,
        probes: latencies.len(),
        probes_lost: lost,
        probe_p50: crate::bench::percentile(&latencies, 50),
        probe_p99: crate::bench::percentile(&latencies, 99),
        errors: shared.errors.load(Ordering::Relaxed) - errors_before,
        costs,
    })
}

/// API writes per node per minute with the shipped status reporting, then with a report at
/// every tick (the kubelet's behaviour before Leases), each over [`Args::writes_window`].
async fn measure_writes(
    args: &Args,
    client: &kube::Client,
    shared: &Shared,
    size: usize,
) -> anyhow::Result<Writes> {
    let window = Duration::from_secs(args.writes_window);
    let mut measured = Vec::new();
    for period in [STATUS_REPORT, STATUS_TICK] {
        eprintln!("bench fleet: API writes with the node status reported every {period:?}");
        shared
            .status_period_ms
            .store(period.as_millis() as u64, Ordering::Relaxed);
        let before = api_writes(client).await?;
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let after = api_writes(client).await?;
        measured.push((period, per_node_minute(&before, &after, size, t0.elapsed())));
    }
    shared
        .status_period_ms
        .store(STATUS_REPORT.as_millis() as u64, Ordering::Relaxed);
    Ok(Writes { size, measured })
}

/// Kills replica 1 (its nodes move to the others: time until all resynced there), starts it
/// again, then restarts every replica with TLS resumption off (time until every node
/// resynced after full handshakes).
async fn failover(
    cloud: &mut Cloud,
    shared: &Shared,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    size: usize,
) -> anyhow::Result<Failover> {
    while let Ok(event) = events.try_recv() {
        tracker.take(event);
    }
    let victims: Vec<usize> = (0..size)
        .filter(|i| tracker.last.get(i).is_some_and(|(r, _)| *r == 1))
        .collect();
    eprintln!(
        "bench fleet: killing {} ({} nodes)",
        cloud.replicas[1].name,
        victims.len()
    );
    let killed = Instant::now();
    cloud.kill(1);
    tracker
        .wait(
            events,
            |t| {
                victims
                    .iter()
                    .all(|i| t.last.get(i).is_some_and(|(r, at)| *r != 1 && *at > killed))
            },
            Duration::from_secs(600),
        )
        .await
        .context("the killed replica's nodes did not move")?;
    let moved_in = killed.elapsed();
    eprintln!("  its nodes resynced on the other replicas after {moved_in:.1?}");
    cloud.restart(1).await?;

    eprintln!("bench fleet: restarting every replica (full TLS handshakes)");
    shared.resume_tls.store(false, Ordering::Relaxed);
    let reconnects_before = shared.reconnects.load(Ordering::Relaxed);
    let restarted = Instant::now();
    for i in 0..cloud.replicas.len() {
        cloud.kill(i);
    }
    for i in 0..cloud.replicas.len() {
        cloud.restart(i).await?;
    }
    tracker
        .wait(
            events,
            |t| (0..size).all(|i| t.last.get(&i).is_some_and(|(_, at)| *at > restarted)),
            Duration::from_secs(900),
        )
        .await
        .context("not every node resynced after the restart")?;
    let all_back_in = restarted.elapsed();
    eprintln!("  all {size} resynced after {all_back_in:.1?}");
    shared.resume_tls.store(true, Ordering::Relaxed);
    Ok(Failover {
        moved: victims.len(),
        moved_in,
        all_back_in,
        reconnects: shared.reconnects.load(Ordering::Relaxed) - reconnects_before,
    })
}

#[cfg(test)]
mod tests {
    use super::node_cidr_mask;

    #[test]
    fn the_pod_range_per_node_is_the_widest_that_fits_the_fleet() {
        assert_eq!(node_cidr_mask(100).expect("100"), 24);
        assert_eq!(node_cidr_mask(256).expect("256"), 24);
        assert_eq!(node_cidr_mask(257).expect("257"), 25);
        assert_eq!(node_cidr_mask(6000).expect("6000"), 29);
        assert_eq!(node_cidr_mask(8192).expect("8192"), 29);
        assert_eq!(node_cidr_mask(10_000).expect("10000"), 30);
        assert_eq!(node_cidr_mask(16_384).expect("16384"), 30);
        assert!(node_cidr_mask(16_385).is_err());
    }
}
