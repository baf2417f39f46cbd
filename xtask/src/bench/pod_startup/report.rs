//! The pod-startup bench's tables and targets in `docs/benchmarks.md`.

use std::time::Duration;

use super::IMAGE;
use crate::bench::Summary;
use crate::bench::record::{self, Target};

/// What one run measured.
pub(super) struct Results {
    pub(super) n: usize,
    pub(super) release: bool,
    pub(super) verge_one: Vec<Duration>,
    pub(super) docker_one: Vec<Duration>,
    pub(super) verge_all: Vec<Duration>,
    pub(super) docker_all: Vec<Duration>,
    /// The same `docker run -d` on a user-defined network at fixed addresses.
    pub(super) network_one: Vec<Duration>,
    pub(super) network_all: Vec<Duration>,
    /// The other pod shapes one at a time: Verge's times and their own baseline's.
    pub(super) shapes: Vec<(super::Shape, Vec<Duration>, Vec<Duration>)>,
    /// edgecore's VmRSS (KiB) with 0, N and the memory count of pods running, settled
    /// (15 s after the last of them runs).
    pub(super) rss_kib: [(usize, u64); 3],
    /// edgecore's VmRSS (KiB) 3 s after the burst of N pods and after the burst up to the
    /// memory count.
    pub(super) rss_burst_kib: [u64; 2],
    /// The stages of the traced pods started one at a time ([`super::stages::table`]).
    pub(super) stage_table: String,
    /// The same for the traced pods created at once.
    pub(super) burst_stage_table: String,
}

/// KubeEdge's scale test: pod start-up p50 and p99 (its published figures).
const KUBEEDGE_POD_START: &str = "KubeEdge scale test: p50 1.69 s, p99 4.09 s";

impl Results {
    /// Prints the tables and writes them, with the targets, to `docs/benchmarks.md`.
    pub(super) fn record(&self) -> anyhow::Result<()> {
        let n = self.n;
        let mut table = String::from(
            "| mode | what | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n",
        );
        for (mode, verge, docker, network) in [
            (
                "one at a time",
                &self.verge_one,
                &self.docker_one,
                &self.network_one,
            ),
            (
                "all at once",
                &self.verge_all,
                &self.docker_all,
                &self.network_all,
            ),
        ] {
            table.push_str(&rows(mode, verge, docker, "docker run -d"));
            table.push_str(&baseline_rows(mode, verge, network, NETWORK_BASELINE));
        }
        let mut shapes = String::from(
            "| pods of | what | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n",
        );
        for (shape, verge, docker) in &self.shapes {
            shapes.push_str(&rows(shape.describe(), verge, docker, shape.baseline()));
        }
        let mib = |kib: u64| kib as f64 / 1024.0;
        let memory = format!(
            "edgecore resident memory (VmRSS), settled (15 s after the last pod runs): {}; \
             3 s after each burst: {:.1} MiB with {} pods, {:.1} MiB with {} pods.",
            self.rss_kib
                .iter()
                .map(|(pods, kib)| format!("{:.1} MiB with {pods} pods", mib(*kib)))
                .collect::<Vec<_>>()
                .join(", "),
            mib(self.rss_burst_kib[0]),
            self.rss_kib[1].0,
            mib(self.rss_burst_kib[1]),
            self.rss_kib[2].0,
        );
        let targets = record::targets_table(&self.targets());
        println!(
            "pod-startup on one edge node (image {IMAGE}; pods of one container)\n{table}\n\
             Other pods, one at a time, against the same containers by `docker run` in \
             sequence:\n{shapes}\n{memory}\n\nWhere the time goes (traced, one at a \
             time):\n{}\nThe same, {n} created at once:\n{}\n{targets}",
            self.stage_table, self.burst_stage_table
        );
        let body = format!(
            "{n} pods of one container one at a time, then {n} created concurrently, on one \
             edge node (image `{IMAGE}`; such a pod runs without a sandbox, its container \
             holding the pod's network), timed from the create call to `phase: Running` seen \
             by an API watch; baseline: `docker run -d` of the same image and command, \
             sequential and then {n} concurrent, timed until the command returns (container \
             started), on Docker's default bridge, and again on a user-defined bridge network \
             at fixed addresses (what the pod's container needs: Docker gives a container there \
             its embedded DNS resolver). Then {n} pods of two containers and {n} pods with an init container \
             one at a time (these have a sandbox), each against the same containers started \
             by `docker run` in sequence. Then more pods at once, up to {} in all, for the \
             memory figure. Verge binaries: {} build.\n\n{table}\n{shapes}\n{memory}\n\n\
             Where the time goes: the same {n} pods one at a time on a second edge node whose \
             Verge exports every span to Jaeger (sampling 1.0, which costs a few per cent, \
             see the tracing bench), each pod's trace cut at the pipeline's spans into \
             consecutive stages that add up to its create → Running time (a sandbox stage would \
             include the pod worker's start and the pause image check; these pods have none, \
             and the worker's start falls in the stage after it).\n\n{}\n\
             Then {n} pods created at once on that node, cut the same way (each stage's time \
             includes waiting behind the other pods' work at it):\n\n{}\n{targets}",
            self.rss_kib[2].0,
            if self.release {
                "release (edgecore: the size-optimised `edge` profile)"
            } else {
                "debug"
            },
            self.stage_table,
            self.burst_stage_table,
        );
        record::write(
            "pod-startup",
            "pod-startup: create → Running vs `docker run -d`",
            &body,
        )
    }

    /// The targets against this run's figures.
    fn targets(&self) -> Vec<record::Target> {
        let (one, d_one) = (Summary::of(&self.verge_one), Summary::of(&self.docker_one));
        let (all, d_all) = (Summary::of(&self.verge_all), Summary::of(&self.docker_all));
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
            "pod create → Running, one at a time: p50 ≤ 1.0× `docker run -d`".into(),
            one.p50,
            d_one.p50,
            1.0,
        )];
        if let (Some(v), Some(d)) = (one.p99, d_one.p99) {
            out.push(time_target(
                "pod create → Running, one at a time: p99 ≤ 1.2× `docker run -d`".into(),
                v,
                d,
                1.2,
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
                goal: format!("edgecore RSS with {pods} pods ≤ {limit} MiB (release, settled)"),
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

/// The second baseline's words.
const NETWORK_BASELINE: &str = "docker run -d --network <user-defined> --ip";

/// Table rows of a baseline of one mode: the baseline and Verge's ratios to it.
fn baseline_rows(mode: &str, verge: &[Duration], docker: &[Duration], baseline: &str) -> String {
    let (v, d) = (Summary::of(verge), Summary::of(docker));
    let ratio = |a: Duration, b: Duration| format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64());
    let p99 = match (v.p99, d.p99) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "–".to_owned(),
    };
    format!(
        "| {mode} | {baseline} | {} |\n\
         | {mode} | ratio verge / {baseline} | | {} | {} | {p99} | {} |\n",
        record::duration_cells(&d),
        ratio(v.p50, d.p50),
        ratio(v.p90, d.p90),
        ratio(v.max, d.max),
    )
}

/// Table rows of one mode: Verge, then the docker baseline (`baseline` in the report's
/// words) and the ratios ([`baseline_rows`]).
fn rows(mode: &str, verge: &[Duration], docker: &[Duration], baseline: &str) -> String {
    format!(
        "| {mode} | verge: create → Running | {} |\n{}",
        record::duration_cells(&Summary::of(verge)),
        baseline_rows(mode, verge, docker, baseline),
    )
}
