//! The benchmark's result as Markdown.

use std::time::Duration;

use super::edge::SessionStats;
use super::objects::{self, OBJECTS_PER_NODE};
use super::phase::Phase;
use super::{SETTLE_QUIET, percentile};

/// Everything one run measured.
pub(super) struct Report<'a> {
    pub(super) n: usize,
    pub(super) setup: Duration,
    /// Time until kube-controller-manager stopped editing the Nodes.
    pub(super) settled: Duration,
    /// Whether the Nodes stopped changing before the phases.
    pub(super) quiet: bool,
    pub(super) cold: Option<&'a Phase>,
    pub(super) warm: &'a Phase,
    pub(super) markers: bool,
    /// Idle RSS (KiB) of cloudhub and edgecontroller.
    pub(super) idle: (u64, u64),
    /// Peak RSS (KiB) during the cold phase.
    pub(super) cold_rss: (u64, u64),
    /// Peak RSS (KiB) during the reconnect.
    pub(super) warm_rss: (u64, u64),
    /// VmHWM (KiB) at the end.
    pub(super) hwm: (u64, u64),
}

impl Report<'_> {
    /// The result as Markdown (printed, and written to `docs/benchmarks.md`).
    pub(super) fn render(&self) -> String {
        use std::fmt::Write as _;
        let n = self.n;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let conns = format!(
            "{n} mutual-TLS HTTP/2 connections (one per node, each with its node certificate)"
        );
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
