//! The fleet bench's tables in `docs/benchmarks.md`: each step, the per-node costs of the
//! largest fleet that held, the API writes with each node status period, the replica
//! fail-over, and the projection of the per-node costs to 100,000 nodes.
//!
//! The projection's model is linear: a component's CPU is its CPU seconds per node-hour
//! times the nodes; its memory is what it holds at the measured size plus the memory per
//! node (measured size against idle) times the nodes added. It leaves out what does not grow
//! with nodes alone (a pod churn, object counts per node) and the API server's and etcd's
//! own limits (watch cache, database size), which KubeEdge's published test tuned.

use std::time::Duration;

use crate::bench::record;

/// Nodes the projection is made for.
const PROJECTED: f64 = 100_000.0;
/// KubeEdge's published 100,000-node test (its performance report).
const KUBEEDGE: &str = "KubeEdge's published test: 100,000 edge nodes and 1,000,000 pods \
    on 5 CloudCore replicas of 12 vCPU each and a control plane of 128 cores";

/// The per-node costs measured over one hold.
#[derive(Debug, Clone)]
pub(super) struct Costs {
    /// Nodes in the fleet.
    pub size: usize,
    /// CPU seconds per node-hour of each watched process group, in `watched` order.
    pub cpu_per_node_hour: Vec<f64>,
    /// Resident KiB of each watched process group at the end of the hold.
    pub rss_kib: Vec<u64>,
    /// API server writes per node per minute, by resource, most first.
    pub writes: Vec<(String, f64)>,
}

/// One fleet size.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub size: usize,
    /// From the first new node's creation until all connected, resynced and Ready.
    pub connected_in: Duration,
    /// The fewest Ready Nodes seen during the hold.
    pub min_ready: usize,
    /// Probe pods that reached their node, and those that did not within 30 s.
    pub probes: usize,
    pub probes_lost: usize,
    /// Pod create call → the pod at its hollow edge.
    pub probe_p50: Duration,
    pub probe_p99: Duration,
    /// `error` answers to the edges' reports during the hold.
    pub errors: u64,
    pub costs: Costs,
}

/// API writes per node per minute with each node status report period.
#[derive(Debug)]
pub(super) struct Writes {
    pub size: usize,
    /// (report period, writes by resource).
    pub measured: Vec<(Duration, Vec<(String, f64)>)>,
}

/// The replica fail-over and the restart of every replica.
#[derive(Debug)]
pub(super) struct Failover {
    /// Nodes on the killed replica.
    pub moved: usize,
    /// Until every one of them resynced on another replica.
    pub moved_in: Duration,
    /// After every replica restarted, until every node resynced (full TLS handshakes).
    pub all_back_in: Duration,
    /// Sessions that failed and were opened again meanwhile.
    pub reconnects: u64,
}

/// What the run measured.
#[derive(Debug)]
pub(super) struct Report {
    pub steps: Vec<Step>,
    /// The size that did not hold, and how it failed (none: every size held).
    pub not_held: Option<(usize, String)>,
    /// The largest size that held, and its costs.
    pub held: Option<(usize, Costs)>,
    /// Each watched group's label and its (CPU seconds, resident KiB) with no node.
    pub idle: Vec<(String, (f64, u64))>,
    pub writes: Writes,
    pub failover: Failover,
    pub hold: Duration,
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Report {
    /// Prints the tables and writes them to `docs/benchmarks.md`.
    pub(super) fn record(&self) -> anyhow::Result<()> {
        let mut steps = String::from(
            "| nodes | connected, resynced and Ready after | fewest Ready during the hold | \
             pod create → at its node p50 / p99 (n) | API writes per node per minute | \
             errors |\n|---|---|---|---|---|---|\n",
        );
        for s in &self.steps {
            steps.push_str(&format!(
                "| {} | {:.1} s | {} | {} / {} ({}{}) | {:.2} | {} |\n",
                s.size,
                s.connected_in.as_secs_f64(),
                s.min_ready,
                ms(s.probe_p50),
                ms(s.probe_p99),
                s.probes,
                if s.probes_lost > 0 {
                    format!(", {} lost", s.probes_lost)
                } else {
                    String::new()
                },
                s.costs.writes.iter().map(|(_, r)| r).sum::<f64>(),
                s.errors,
            ));
        }
        match &self.not_held {
            Some((size, why)) => steps.push_str(&format!("\n{size} nodes did not hold: {why}.\n")),
            None => steps.push_str("\nEvery size held (larger ones were not tried).\n"),
        }
        let costs = self.costs_table();
        let writes = self.writes_table();
        let f = &self.failover;
        let failover = format!(
            "A cloudhub replica killed: its {} nodes resynced on the other two after {:.1} s. \
             Every replica restarted at once, each edge reconnecting with a full TLS handshake \
             (no resumption): all {} nodes resynced after {:.1} s ({} failed sessions opened \
             again meanwhile).",
            f.moved,
            f.moved_in.as_secs_f64(),
            self.writes.size,
            f.all_back_in.as_secs_f64(),
            f.reconnects,
        );
        let projection = self.projection();
        let body = format!(
            "Hollow edges speaking the whole protocol (registration, Lease handed to \
             edgecontroller's renewer, full node status at each session then only changes \
             plus every 5 minutes, pod status for their pods, resync by inventory) over \
             mutual TLS against three cloudhub replicas and two edgecontrollers with leader \
             election (release builds, shipped defaults), on the kit's control plane with \
             every kube-controller-manager controller on and upstream's node monitoring (grace \
             50 s). Each size holds for {} with a probe pod every 3 s; the edges run in the \
             bench's own process on the same 2-core machine as the whole cloud and control \
             plane.\n\n{steps}\n{costs}\n{writes}\n{failover}\n\n{projection}",
            humantime(self.hold),
        );
        println!("{body}");
        record::write(
            "fleet",
            "fleet: hollow edges against the cloud as deployed",
            &body,
        )
    }

    fn costs_table(&self) -> String {
        let Some((_, costs)) = &self.held else {
            return "No size held.\n".to_owned();
        };
        let size = &costs.size;
        let mut out = format!(
            "Per-node costs at {size} nodes (the largest size that held):\n\n\
             | process | CPU s per node-hour | RSS idle | RSS at {size} nodes | RSS per node |\n\
             |---|---|---|---|---|\n"
        );
        for (i, (label, (_, idle_kib))) in self.idle.iter().enumerate() {
            let rss = costs.rss_kib.get(i).copied().unwrap_or(0);
            let per_node = rss.saturating_sub(*idle_kib) as f64 / *size as f64;
            out.push_str(&format!(
                "| {label} | {:.3} | {:.1} MiB | {:.1} MiB | {per_node:.1} KiB |\n",
                costs.cpu_per_node_hour.get(i).copied().unwrap_or(0.0),
                mib(*idle_kib),
                mib(rss),
            ));
        }
        out
    }

    fn writes_table(&self) -> String {
        let mut out = format!(
            "API server writes per node per minute at {} nodes, by resource:\n\n\
             | node status reported | total | by resource |\n|---|---|---|\n",
            self.writes.size
        );
        for (period, by) in &self.writes.measured {
            let total: f64 = by.iter().map(|(_, r)| r).sum();
            let detail: Vec<String> = by.iter().map(|(res, r)| format!("{res} {r:.2}")).collect();
            let what = if period.as_secs() >= 60 {
                format!("on change + every {} (shipped)", humantime(*period))
            } else {
                format!("every {} (before Leases)", humantime(*period))
            };
            out.push_str(&format!(
                "| {what} | {total:.2} | {} |\n",
                detail.join(", ")
            ));
        }
        out
    }

    fn projection(&self) -> String {
        let Some((size, costs)) = &self.held else {
            return String::new();
        };
        let mut out = format!(
            "Projection to 100,000 nodes from the per-node costs at {size} (linear model: CPU \
             s per node-hour × nodes / 3600 s; memory at {size} plus the memory per node × \
             the nodes added; the edges' own process left out):\n\n\
             | process | cores | memory |\n|---|---|---|\n"
        );
        let (mut cores_total, mut mem_total) = (0.0, 0.0);
        for (i, (label, (_, idle_kib))) in self.idle.iter().enumerate() {
            if label.starts_with("hollow") {
                continue;
            }
            let cpu = costs.cpu_per_node_hour.get(i).copied().unwrap_or(0.0);
            let rss = costs.rss_kib.get(i).copied().unwrap_or(0) as f64;
            let per_node = (rss - *idle_kib as f64).max(0.0) / *size as f64;
            let cores = cpu * PROJECTED / 3600.0;
            let mem_gib = (rss + per_node * (PROJECTED - *size as f64)) / (1024.0 * 1024.0);
            cores_total += cores;
            mem_total += mem_gib;
            out.push_str(&format!("| {label} | {cores:.1} | {mem_gib:.1} GiB |\n"));
        }
        out.push_str(&format!(
            "| **all** | **{cores_total:.1}** | **{mem_total:.1} GiB** |\n\n{KUBEEDGE}.\n"
        ));
        out
    }
}

/// `d` as minutes or seconds.
fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}
