//! The Markdown of one `bench scale` run: the storms, the steady state, idle traffic per
//! node, downstream latency under load, and the targets of issue 17.

use std::fmt::Write as _;
use std::time::Duration;

use super::proc;
use crate::bench::reconnect::Services;
use crate::bench::record::{Target, targets_table};
use crate::bench::{Summary, percentile};
use crate::local::status_kib;

/// KubeEdge's published idle traffic per edge node (its scalability test report).
const KUBEEDGE_IDLE: &str = "KubeEdge: 0.25 kbit/s per node";

/// The cloud processes at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    /// RSS (KiB) of cloudhub, edgecontroller.
    pub rss_kib: (u64, u64),
    /// CPU seconds used so far by cloudhub, edgecontroller.
    pub cpu: (f64, f64),
    /// Open file descriptors of cloudhub.
    pub cloudhub_fds: usize,
    /// When.
    pub at: std::time::Instant,
}

impl Snapshot {
    /// Reads `/proc` for both services.
    pub fn take(services: &Services) -> Self {
        let (hub, ctrl) = (services.cloudhub, services.edgecontroller);
        Self {
            rss_kib: (
                status_kib(hub, "VmRSS").unwrap_or(0),
                status_kib(ctrl, "VmRSS").unwrap_or(0),
            ),
            cpu: (
                proc::cpu_seconds(hub).unwrap_or(0.0),
                proc::cpu_seconds(ctrl).unwrap_or(0.0),
            ),
            cloudhub_fds: proc::open_fds(hub).unwrap_or(0),
            at: std::time::Instant::now(),
        }
    }
}

/// One connect or reconnect storm.
#[derive(Debug, Clone, Default)]
pub struct StormFigures {
    /// Until the last node's marker.
    pub all_after: Duration,
    /// Each node's time to its marker, sorted.
    pub per_node: Vec<Duration>,
    /// Object messages received per node.
    pub objects: Vec<u64>,
    /// Updates of objects already held at that version.
    pub redundant: u64,
    /// Sessions that failed and were reopened.
    pub reconnects: u64,
    /// Connection attempts that failed.
    pub connect_failures: u64,
    /// CPU seconds during the storm per process (group), cloudhub first
    /// ([`super::proc::watched`]).
    pub cpu: Vec<(&'static str, f64)>,
    /// cloudhub's peak RSS during the storm, KiB.
    pub cloudhub_peak_kib: u64,
}

/// Everything one run measured.
#[derive(Debug)]
pub struct Report {
    pub n: usize,
    /// `release` or `debug`.
    pub build: &'static str,
    pub setup: Duration,
    pub idle: Duration,
    pub status_period: Duration,
    pub before: Snapshot,
    pub steady: (Snapshot, Snapshot),
    /// Bytes (up, down) over the steady window, all nodes.
    pub bytes: (u64, u64),
    pub status_reports: u64,
    pub connect: StormFigures,
    /// (create call → held by the edge, create call alone) per probe pod.
    pub probes: Vec<(Duration, Duration)>,
    /// (pod create call → its own Secret held by the edge, create calls alone) per Secret
    /// probe, and the services before and after them.
    pub secret_probes: Vec<(Duration, Duration)>,
    pub secret_watches: (Snapshot, Snapshot),
    pub dropped: Snapshot,
    pub reconnect: StormFigures,
    pub after: Snapshot,
    pub first_error: Option<String>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// What the run simulates or leaves out, so that no figure is read as one of `n` real
/// edgecores (see the module docs of [`super`] and [`super::hollow`]).
fn simulated_table(out: &mut String, n: usize) {
    let _ = writeln!(
        out,
        "| simulated or left out | in this run |\n|---|---|\n\
         | edge nodes | {n} hollow edges: simulated edge nodes, tasks in the xtask process, each \
         with its own connection and node certificate; no edgecore, no pods run, no Docker (a \
         pod bound to one is only held in memory) |\n\
         | joining | none: the benchmark creates the Nodes and issues the node certificates \
         from the Verge CA itself |\n\
         | Lease renewal | none: nothing renews the hollow nodes' Leases |\n\
         | node lifecycle | kube-controller-manager's node-lifecycle controller (and TTL \
         controller) off: no Node is marked unreachable for its stale Lease |\n\
         | reconnect | TLS session resumption: each hollow edge keeps its TLS session store \
         across reconnects (as edgecore does) and cloudhub issues session tickets, so \
         reconnects may resume instead of a full handshake (how many did is not counted) |\n"
    );
}

impl Report {
    /// The Markdown.
    pub fn render(&self) -> String {
        let n = self.n;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{n} hollow edge nodes in one process (`bench::scale::hollow`), each over its own \
             mutual-TLS HTTP/2 connection with its node certificate, speaking what an idle \
             edgecore speaks: keepalives at the interval cloudhub's welcome gives, an ack per \
             object message, and its node status every {}s (edgecore's \
             `nodeStatusReportFrequency`; only the conditions, as an idle edgecore sends it); real cloudhub and edgecontroller ({}) with \
             their shipped defaults, on the real control plane. The {n} Nodes were created by \
             the benchmark in {:.1?}; kube-controller-manager runs without its node lifecycle \
             and TTL controllers, and nothing renews the hollow nodes' Leases (see \
             `xtask/src/bench/scale/mod.rs`). The hollow edges run in the release build of \
             xtask; every process shares the machine's 2 cores, so a storm's cloudhub CPU \
             against its duration tells whether cloudhub was its bound.\n",
            self.status_period.as_secs(),
            self.build,
            self.setup,
        );
        simulated_table(&mut out, n);
        self.storms(&mut out);
        self.steady_table(&mut out);
        let idle = self.idle_table(&mut out);
        let probe = self.probe_table(&mut out);
        self.secret_table(&mut out, &probe);
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "First session failure seen: `{e}`.\n");
        }
        out.push_str(&targets_table(&self.targets(idle, probe)));
        out
    }

    fn storms(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| storm | all resynced after | per node p50 | per node p99 | object messages per \
             node (min / avg / max) | of which redundant | sessions reopened | connect failures \
             | cloudhub CPU | cloudhub peak RSS |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        for (name, s) in [
            ("connect (empty inventories)", &self.connect),
            ("reconnect (full inventories)", &self.reconnect),
        ] {
            let min = s.objects.iter().min().copied().unwrap_or(0);
            let max = s.objects.iter().max().copied().unwrap_or(0);
            let avg = s.objects.iter().sum::<u64>() as f64 / s.objects.len().max(1) as f64;
            let _ = writeln!(
                out,
                "| {name} | {:.2}s | {:.2}s | {:.2}s | {min} / {avg:.2} / {max} | {} | {} | {} \
                 | {:.1} s | {:.1} MiB |",
                s.all_after.as_secs_f64(),
                percentile(&s.per_node, 50).as_secs_f64(),
                percentile(&s.per_node, 99).as_secs_f64(),
                s.redundant,
                s.reconnects,
                s.connect_failures,
                s.cpu.first().map_or(0.0, |(_, c)| *c),
                mib(s.cloudhub_peak_kib),
            );
        }
        out.push('\n');
        self.storm_cpu_table(out);
    }

    /// Where each storm's CPU went, per process, against its duration.
    fn storm_cpu_table(&self, out: &mut String) {
        let (connect, reconnect) = (&self.connect, &self.reconnect);
        let _ = writeln!(
            out,
            "CPU seconds used during each storm (2 cores: at most twice its duration):\n"
        );
        let _ = writeln!(out, "| process | connect | reconnect |\n|---|---|---|");
        let cell = |s: &StormFigures, i: usize| s.cpu.get(i).map_or(0.0, |(_, c)| *c);
        for (i, (label, _)) in connect.cpu.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {label} | {:.1} s | {:.1} s |",
                cell(connect, i),
                cell(reconnect, i)
            );
        }
        let total = |s: &StormFigures| s.cpu.iter().map(|(_, c)| c).sum::<f64>();
        let _ = writeln!(
            out,
            "| all of these (storm duration) | {:.1} s ({:.1} s) | {:.1} s ({:.1} s) |\n",
            total(connect),
            connect.all_after.as_secs_f64(),
            total(reconnect),
            reconnect.all_after.as_secs_f64()
        );
    }

    fn steady_table(&self, out: &mut String) {
        let (start, end) = self.steady;
        let wall = end.at.duration_since(start.at).as_secs_f64();
        let n = self.n as f64;
        let _ = writeln!(
            out,
            "| process | RSS before any session | RSS with {} idle sessions | per session | CPU \
             with {} idle sessions | RSS after all dropped | RSS after the reconnect |\n\
             |---|---|---|---|---|---|---|",
            self.n, self.n
        );
        let rows = [
            (
                "cloudhub",
                self.before.rss_kib.0,
                end.rss_kib.0,
                end.cpu.0 - start.cpu.0,
                self.dropped.rss_kib.0,
                self.after.rss_kib.0,
            ),
            (
                "edgecontroller",
                self.before.rss_kib.1,
                end.rss_kib.1,
                end.cpu.1 - start.cpu.1,
                self.dropped.rss_kib.1,
                self.after.rss_kib.1,
            ),
        ];
        for (name, before, steady, cpu, dropped, after) in rows {
            let per = (steady.saturating_sub(before)) as f64 / n;
            let _ = writeln!(
                out,
                "| {name} | {:.1} MiB | {:.1} MiB | {per:.1} KiB | {:.1} % of one core | {:.1} MiB \
                 | {:.1} MiB |",
                mib(before),
                mib(steady),
                100.0 * cpu / wall,
                mib(dropped),
                mib(after),
            );
        }
        let _ = writeln!(
            out,
            "\ncloudhub held {} open file descriptors with {} sessions.\n",
            end.cloudhub_fds, self.n
        );
    }

    /// Returns the larger direction's kbit/s per node.
    fn idle_table(&self, out: &mut String) -> f64 {
        let minutes = self.idle.as_secs_f64() / 60.0;
        let n = self.n as f64;
        let per_min = |b: u64| b as f64 / n / minutes;
        let kbit = |b: u64| per_min(b) * 8.0 / 60.0 / 1000.0;
        let _ = writeln!(
            out,
            "Idle traffic per node over {:.0?} (bytes on the TCP stream: TLS records with the \
             HTTP/2 and gRPC framing; TCP/IP headers not counted); {} status reports were \
             sent in the window by the {} nodes.\n\n| direction | bytes per node per minute | \
             kbit/s per node |\n|---|---|---|",
            self.idle, self.status_reports, self.n
        );
        let _ = writeln!(
            out,
            "| edge → cloud | {:.0} B | {:.3} |",
            per_min(self.bytes.0),
            kbit(self.bytes.0)
        );
        let _ = writeln!(
            out,
            "| cloud → edge | {:.0} B | {:.3} |\n",
            per_min(self.bytes.1),
            kbit(self.bytes.1)
        );
        kbit(self.bytes.0).max(kbit(self.bytes.1))
    }

    /// Returns the summary of create → held.
    fn probe_table(&self, out: &mut String) -> Summary {
        let mut total: Vec<Duration> = self.probes.iter().map(|p| p.0).collect();
        let mut api: Vec<Duration> = self.probes.iter().map(|p| p.1).collect();
        total.sort();
        api.sort();
        let (t, a) = (Summary::of(&total), Summary::of(&api));
        let _ = writeln!(
            out,
            "Downstream under load: {} pods created one at a time, each bound to another of the \
             {} connected nodes.\n\n| from the create call | n | p50 | p90 | p99 | max |\n\
             |---|---|---|---|---|---|",
            t.n, self.n
        );
        summary_row(out, "until the hollow edge holds it", &t);
        summary_row(
            out,
            "until the API server answered the create (part of the above)",
            &a,
        );
        out.push('\n');
        t
    }

    /// The cost of edgecontroller's node-scoped Secret access: each referenced Secret is one
    /// watch, run as a node using it (`services/edgecontroller/src/referenced.rs`).
    fn secret_table(&self, out: &mut String, pods: &Summary) {
        let mut total: Vec<Duration> = self.secret_probes.iter().map(|p| p.0).collect();
        total.sort();
        let t = Summary::of(&total);
        let (before, after) = &self.secret_watches;
        let _ = writeln!(
            out,
            "Node-scoped Secrets: {} pods created one at a time, each bound to another node and \
             mounting a Secret of its own (created just before it). edgecontroller reads no \
             Secret in its own name: for each Secret an edge pod uses it opens one watch of that \
             object, as the node (Node authorizer), so the Secret reaches the edge only after the \
             pod is seen, the watch opened and its first list answered.\n\n\
             | from the pod's create call | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|",
            t.n
        );
        summary_row(out, "until the hollow edge holds the pod's Secret", &t);
        summary_row(
            out,
            "until it holds a pod (the pod probes above, same run)",
            pods,
        );
        out.push('\n');
        let _ = writeln!(
            out,
            "edgecontroller RSS with those {} object watches open: {:.1} MiB (before them: \
             {:.1} MiB, {:.1} KiB per watch).\n",
            t.n,
            mib(after.rss_kib.1),
            mib(before.rss_kib.1),
            (after.rss_kib.1 as f64 - before.rss_kib.1 as f64) / t.n.max(1) as f64,
        );
    }

    fn targets(&self, idle_kbit: f64, probe: Summary) -> Vec<Target> {
        let n = self.n;
        let steady_mib = mib(self.steady.1.rss_kib.0);
        let peak_mib = mib(self
            .connect
            .cloudhub_peak_kib
            .max(self.reconnect.cloudhub_peak_kib)
            .max(self.steady.1.rss_kib.0));
        let resends: u64 = self.reconnect.objects.iter().sum();
        let p99 = probe.p99.unwrap_or(probe.max);
        vec![
            Target {
                goal: format!("one cloudhub, {n} sessions: RSS < 500 MB"),
                figure: format!("{steady_mib:.0} MiB steady, {peak_mib:.0} MiB peak"),
                anchor: format!(
                    "{:.0} MiB with no session (same run)",
                    mib(self.before.rss_kib.0)
                ),
                met: peak_mib * 1.048_576 < 500.0,
            },
            Target {
                goal: format!("downstream p99 < 50 ms with {n} sessions"),
                figure: format!("p99 {} (p50 {})", ms(p99), ms(probe.p50)),
                anchor: "the API server's create answer is part of it".to_owned(),
                met: p99 < Duration::from_millis(50),
            },
            Target {
                goal: format!("reconnect of all {n} resynced in < 10 s"),
                figure: format!("{:.2} s", self.reconnect.all_after.as_secs_f64()),
                anchor: format!(
                    "first connect of all: {:.2} s (same run)",
                    self.connect.all_after.as_secs_f64()
                ),
                met: self.reconnect.all_after < Duration::from_secs(10),
            },
            Target {
                goal: "reconnect: 0 object re-sends".to_owned(),
                figure: format!("{resends} object messages"),
                anchor: "resync by inventory".to_owned(),
                met: resends == 0,
            },
            Target {
                goal: "idle traffic ≤ 0.1 kbit/s per node (each direction)".to_owned(),
                figure: format!("{idle_kbit:.3} kbit/s"),
                anchor: KUBEEDGE_IDLE.to_owned(),
                met: idle_kbit <= 0.1,
            },
        ]
    }
}

/// One `| what | n | p50 | p90 | p99 | max |` row of `s`.
fn summary_row(out: &mut String, what: &str, s: &Summary) {
    let p99 = s.p99.map_or_else(|| "–".to_owned(), ms);
    let _ = writeln!(
        out,
        "| {what} | {} | {} | {} | {p99} | {} |",
        s.n,
        ms(s.p50),
        ms(s.p90),
        ms(s.max)
    );
}
