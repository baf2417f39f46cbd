//! `cargo xtask fuzz [--seconds N] [TARGET...]`: builds the coverage-guided fuzz targets of
//! `fuzz/` (a workspace of their own, docs/fuzzing.md) with libFuzzer on stable Rust, runs
//! each for a bounded time, and fails on the first crash, naming the reproducer file.
//!
//! Layout: [`build`](mod@build) (the C++ compiler libFuzzer needs, the instrumentation flags,
//! `cargo build`), [`run`](mod@run) (one libFuzzer run, its statistics and its verdict).
//!
//! Directories, all under `fuzz/`: `seeds/<target>/` (committed seed inputs, read only),
//! `target/corpus/<target>/` (the corpus the runs grow, kept between runs),
//! `target/artifacts/<target>/` (crash reproducers), `target/logs/<target>.log` (libFuzzer's
//! output of the last run).

mod build;
mod run;

pub use build::host_triple;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, bail};

/// Arguments of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long each target runs, in seconds (libFuzzer's `-max_total_time`).
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Memory limit of a target process in MiB (libFuzzer's `-rss_limit_mb`); an input that
    /// makes the target use more is reported as a crash (out of memory).
    #[arg(long, default_value_t = 2048)]
    rss_limit_mb: u64,
    /// Longest time one input may take, in seconds (libFuzzer's `-timeout`); an input that
    /// takes longer is reported as a crash (hang).
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Only build the targets and run the harness tests.
    #[arg(long)]
    build_only: bool,
    /// Write the seed corpora `fuzz/seeds/` again (with fresh keys and certificates) and stop.
    #[arg(long)]
    write_seeds: bool,
    /// The targets to run (names of `fuzz/fuzz_targets/<name>.rs`); all when none is given.
    targets: Vec<String>,
}

/// A short pass over every target, `seconds` each, with the default limits: what
/// `cargo xtask test` runs last.
///
/// # Errors
/// As [`run()`].
pub async fn short_pass(seconds: u64) -> anyhow::Result<ExitCode> {
    run(Args {
        seconds,
        rss_limit_mb: 2048,
        timeout: 10,
        build_only: false,
        write_seeds: false,
        targets: Vec::new(),
    })
    .await
}

/// Builds every target (instrumented, as [`run()`] does) without running any: `cargo xtask
/// test` does this in the background while its tests run, so the closing pass finds them
/// built.
///
/// # Errors
/// No C++ compiler and none installable; cargo failing.
pub fn build_all_targets() -> anyhow::Result<()> {
    let fuzz = fuzz_dir();
    let targets = all_targets(&fuzz)?;
    build::Build::new(&fuzz)?.targets(&targets)
}

/// The `fuzz/` workspace (an absolute path without `..` where the file system allows).
fn fuzz_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    dir.canonicalize().unwrap_or(dir)
}

/// Every target: the file stems of `fuzz/fuzz_targets/*.rs`, sorted.
fn all_targets(fuzz: &Path) -> anyhow::Result<Vec<String>> {
    let dir = fuzz.join("fuzz_targets");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem()
        {
            targets.push(stem.to_string_lossy().into_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

/// Builds, then runs each selected target; `ExitCode::FAILURE` after the first crash.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || run_blocking(&args)).await?
}

fn run_blocking(args: &Args) -> anyhow::Result<ExitCode> {
    let fuzz = fuzz_dir();
    let all = all_targets(&fuzz)?;
    let targets = if args.targets.is_empty() {
        all
    } else {
        for target in &args.targets {
            if !all.contains(target) {
                bail!(
                    "unknown fuzz target {target:?}; targets: {}",
                    all.join(", ")
                );
            }
        }
        args.targets.clone()
    };

    let build = build::Build::new(&fuzz)?;
    if args.write_seeds {
        build.harness_tests(true)?;
        eprintln!(
            "xtask fuzz: seeds written to {}",
            fuzz.join("seeds").display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    build.targets(&targets)?;
    eprintln!(
        "xtask fuzz: built {} target(s) in {:.0?}",
        targets.len(),
        started.elapsed()
    );
    build.harness_tests(false)?;
    if args.build_only {
        return Ok(ExitCode::SUCCESS);
    }
    let bins = build.bin_dir();

    let limits = run::Limits {
        seconds: args.seconds,
        rss_limit_mb: args.rss_limit_mb,
        timeout_seconds: args.timeout,
    };
    eprintln!(
        "xtask fuzz: running {} target(s) for {} s each (rss limit {} MiB)",
        targets.len(),
        limits.seconds,
        limits.rss_limit_mb
    );
    for target in &targets {
        let outcome = run::run_target(&fuzz, &bins.join(target), target, &limits)?;
        println!("{}", outcome.summary(target));
        if let run::Verdict::Crashed {
            reproducer,
            excerpt,
        } = &outcome.verdict
        {
            eprintln!("{excerpt}");
            eprintln!(
                "xtask fuzz: {target} crashed; reproducer: {}\n  replay it: {} {}\n  \
                 then turn it into a regression test (docs/fuzzing.md)",
                reproducer.display(),
                bins.join(target).display(),
                reproducer.display()
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    eprintln!("xtask fuzz: no crash in {} target(s)", targets.len());
    Ok(ExitCode::SUCCESS)
}
