//! `cargo xtask bench <name>`: benchmarks that print figures and ratios against a baseline
//! measured in the same run (never pass/fail timings).
//!
//! Layout: [`pod_startup`] (pods from create to Running through the API, against raw
//! `docker run`; edgecore's resident memory), [`reconnect`] (N simulated edge nodes
//! resyncing by inventory against cloudhub and edgecontroller).

mod pod_startup;
mod reconnect;

use std::process::ExitCode;

use clap::Subcommand;

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// N pods on one edge node: create -> Running (as the API shows it) vs raw
    /// `docker run`, p50/p99 and ratio; edgecore RSS with 0 and N pods.
    PodStartup(pod_startup::Args),
    /// N simulated edge nodes (100 objects each) reconnect at once to cloudhub +
    /// edgecontroller: time until all are resynced, object messages per node when nothing
    /// changed (goal 0), cloudhub's peak RSS.
    Reconnect(reconnect::Args),
}

/// Runs one benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.bench {
        Bench::PodStartup(a) => pod_startup::run(a).await,
        Bench::Reconnect(a) => reconnect::run(a).await,
    }
}

/// The `p`-th percentile (nearest rank, 0..=100) of `sorted` (ascending, non-empty).
pub fn percentile(sorted: &[std::time::Duration], p: usize) -> std::time::Duration {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}
