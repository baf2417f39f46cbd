//! `cargo xtask bench all`: every benchmark in turn with its defaults, each in its own
//! `cargo xtask bench <name>` process (so one failing does not stop the rest and each
//! starts from a clean state), then the overview at the top of `docs/benchmarks.md`: the
//! target rows of every benchmark's newest run, with their anchors.

use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::Context as _;

use super::record;

/// Arguments of `cargo xtask bench all`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run only these benchmarks (by subcommand name), in the usual order.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip these benchmarks (by subcommand name).
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
}

/// The benchmarks `all` runs, in order (subcommand names, default arguments).
pub const ORDER: [&str; 12] = [
    "pod-startup",
    "reconnect",
    "scale",
    "fleet",
    "devices",
    "tracing",
    "streams",
    "apps",
    "net",
    "edge-api",
    "metrics",
    "deploy",
];

/// Runs the benchmarks, then writes the overview; fails when any benchmark failed.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    let chosen: Vec<&str> = ORDER
        .into_iter()
        .filter(|b| args.only.is_empty() || args.only.iter().any(|o| o == b))
        .filter(|b| !args.skip.iter().any(|s| s == b))
        .collect();
    let mut failed = Vec::new();
    let started = Instant::now();
    for (i, bench) in chosen.iter().enumerate() {
        eprintln!(
            "bench all: [{}/{}] cargo xtask bench {bench} ({:.0?} so far)",
            i + 1,
            chosen.len(),
            started.elapsed()
        );
        let t0 = Instant::now();
        let status = Command::new(&exe)
            .args(["bench", bench])
            .status()
            .with_context(|| format!("running bench {bench}"))?;
        eprintln!(
            "bench all: {bench} ended ({status}) after {:.0?}",
            t0.elapsed()
        );
        if !status.success() {
            failed.push(*bench);
        }
    }
    write_overview()?;
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("bench all: failed: {}", failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

/// Writes the overview section from the target rows of every benchmark's newest run.
fn write_overview() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(record::path()).unwrap_or_default();
    let rows = record::newest_targets(&text);
    let mut body = String::from(
        "The targets of every benchmark, from each one's newest run below (its section has \
         the method, the full tables and the previous runs). Anchors are baselines measured \
         in the same run on the same machine, or figures KubeEdge publishes.\n\n\
         | benchmark | target | this run | anchor | met |\n|---|---|---|---|---|\n",
    );
    for (bench, row) in &rows {
        body.push_str(&format!("| {bench} {row}\n"));
    }
    let met = rows.iter().filter(|(_, r)| r.ends_with("| yes |")).count();
    body.push_str(&format!("\n{met} of {} targets met.\n", rows.len()));
    println!("{body}");
    record::write(record::SUMMARY, "Overview: targets", &body)
}
