//! `cargo xtask conformance`: Kubernetes' own e2e specs of the pinned release, run unmodified
//! against the quickstart cluster (its only schedulable nodes are Verge edge nodes), in one
//! of two selections ([`suite`]): `--suite node-conformance` (the `[NodeConformance]` specs
//! of `test/e2e/common/{node,storage,network}`, issue 15, and sig-network's `[Conformance]`
//! specs, issue 32; results in `docs/node-conformance.md`) or `--suite conformance` (the
//! `[Conformance]` specs of `test/e2e/{apps,auth,common,network,node,scheduling,storage}`,
//! issue 35; results in `docs/conformance.md`).
//!
//! Steps: [`build`] (`e2e.test` and agnhost from the release's Go module, cached under
//! `~/.cache/verge/conformance/v<version>/`), [`images`] (the e2e images under their exact
//! names, made without a registry), a dry run listing the selection ([`run`](mod@run)), the
//! quickstart's control plane, cloud services and edge node, the real run (JUnit report read
//! by [`junit`]), then [`report`] writes the document; the cluster is stopped unless `--keep`.
//! With `--nodes N` the cluster has N edge nodes: the quickstart's on the host and N - 1 more,
//! each in a network namespace with a Docker engine of its own, all in one site
//! ([`crate::local::extra_edges`]), for the specs that need several schedulable nodes.

mod build;
mod busybox;
mod images;
mod junit;
mod kubeedge;
mod report;
mod run;
mod subset;
mod suite;

pub use suite::Suite;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use verge_testkit::ControlPlaneConfig;

use crate::{local, quickstart};

/// Arguments of `cargo xtask conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which specs: the kubelet's node conformance (with sig-network's conformance specs), or
    /// Kubernetes' conformance specs of the packages KubeEdge runs plus sig-network's.
    #[arg(long, value_enum, default_value = "node-conformance")]
    pub suite: Suite,
    /// `--ginkgo.focus` regex: run only the matching specs of the selection (default: all;
    /// e.g. `'\[sig-network\]'` for the networking ones).
    #[arg(long, conflicts_with = "subset")]
    pub focus: Option<String>,
    /// Run the CI subset (a few quick specs of each area, `subset.rs`) and write the results
    /// beside the run's logs instead of `docs/conformance.md`.
    #[arg(long)]
    pub subset: bool,
    /// Leave the cluster up afterwards (`cargo xtask down` stops it).
    #[arg(long)]
    pub keep: bool,
    /// `--ginkgo.timeout` of the run, in minutes.
    #[arg(long, default_value_t = 180)]
    pub timeout_mins: u64,
    /// Where to write the results (default the suite's document, `docs/conformance.md` or
    /// `docs/node-conformance.md`, or `conformance/subset.md` in the quickstart's run
    /// directory with `--subset`).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Only build e2e.test, make the images and count the selection; start no cluster.
    #[arg(long)]
    pub prepare_only: bool,
    /// Run nothing: write the document again from the last run's report and its `run.json`
    /// (in the quickstart's run directory), e.g. after the document's format changed.
    #[arg(long, conflicts_with_all = ["subset", "prepare_only", "keep"])]
    pub from_report: bool,
    /// Parallel e2e.test processes (Ginkgo's `--procs`; upstream's node conformance runs 8).
    #[arg(long, default_value_t = 4)]
    pub procs: usize,
    /// How long to wait for the edge node to be Ready, in seconds.
    #[arg(long, default_value_t = 120)]
    pub node_timeout_secs: u64,
    /// Edge nodes of the cluster, for the specs that need several schedulable nodes: node 1
    /// runs on the host with the host's Docker, nodes 2.. each in a network namespace with a
    /// Docker engine of its own, all in one site (`local::extra_edges`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub nodes: u8,
}

/// The first edge node's name (the quickstart's); node k is `verge-edge-<k>`.
const NODE_NAME: &str = "verge-edge-1";

/// The names of a cluster of `nodes` edge nodes.
fn node_names(nodes: u8) -> Vec<String> {
    (1..=nodes.max(1))
        .map(|k| format!("verge-edge-{k}"))
        .collect()
}

/// Builds (or finds cached) what a run needs beside the cluster: e2e.test, agnhost, the
/// Ginkgo CLI and the e2e images in Docker. Blocking; `cargo xtask test` runs it in the
/// background while its other tests run.
///
/// # Errors
/// Go, the compiler, apt or Docker fail.
pub fn prepare() -> anyhow::Result<()> {
    let e2e = build::E2eBuild::new(&quickstart::control_plane_config().version);
    e2e.ensure_built()?;
    e2e.ensure_ginkgo()?;
    verge_testkit::docker::ensure_docker()?;
    verge_testkit::docker::ensure_test_image()?;
    images::ensure_images(&e2e)
}

/// Runs the conformance specs and writes the document; exit code 0 when none failed.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let cp_config = quickstart::control_plane_config();
    let e2e = build::E2eBuild::new(&cp_config.version);

    eprintln!(
        "conformance: [1/6] e2e.test and agnhost of Kubernetes v{}",
        e2e.version
    );
    let build_started = Instant::now();
    let e2e_clone = e2e.clone();
    let built = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
        let built = e2e_clone.ensure_built()?;
        e2e_clone.ensure_ginkgo()?;
        Ok(built)
    })
    .await??;
    eprintln!(
        "conformance:   {} ({:.0?})",
        if built { "built" } else { "cached" },
        build_started.elapsed()
    );

    let selection = if args.subset {
        Suite::subset(subset::focus())
    } else {
        args.suite.selection(args.focus.as_deref())
    };
    let focus = selection.focus.clone();
    let e2e_run = run::E2eRun {
        e2e_test: e2e.e2e_test(),
        ginkgo: e2e.ginkgo(),
        procs: args.procs.max(1),
        repo_root: e2e.kubernetes_source(),
        selection: selection.clone(),
        out_dir: quickstart::run_dir().join("conformance"),
    };
    let run_clone = e2e_run.clone();
    let selected = tokio::task::spawn_blocking(move || run_clone.selected_specs()).await??;
    let to_run = selected
        .iter()
        .filter(|s| selection.excluded_by(&s.text).is_none())
        .count();
    let shown_focus = if args.subset {
        format!("the CI subset of {} specs", subset::SPECS.len())
    } else {
        format!("focus {focus}")
    };
    eprintln!(
        "conformance: [2/6] {} specs selected ({shown_focus}, files {}), {to_run} to run \
         after excluding {}",
        selected.len(),
        selection.focus_file,
        selection.skip_regex()
    );
    if args.from_report {
        let info: report::RunInfo = serde_json::from_slice(
            &std::fs::read(e2e_run.info_path()).context("the last run's run.json")?,
        )?;
        anyhow::ensure!(
            info.suite == args.suite,
            "the last run was --suite {:?}; give the same --suite",
            info.suite
        );
        let xml =
            std::fs::read_to_string(e2e_run.report_path()).context("the last run's junit.xml")?;
        let cases = junit::parse(&xml)?;
        return write(&args, &e2e_run, &info, &selected, &cases, started);
    }
    if args.subset {
        let missing: Vec<&str> = subset::SPECS
            .iter()
            .copied()
            .filter(|want| !selected.iter().any(|s| s.text.contains(want)))
            .collect();
        anyhow::ensure!(
            missing.is_empty(),
            "subset specs not in the selection (renamed upstream?): {missing:?}"
        );
    }

    eprintln!("conformance: [3/6] Docker and the e2e images");
    tokio::task::spawn_blocking(|| -> anyhow::Result<()> {
        verge_testkit::docker::ensure_docker()?;
        verge_testkit::docker::ensure_test_image()
    })
    .await??;
    let e2e_clone = e2e.clone();
    tokio::task::spawn_blocking(move || images::ensure_images(&e2e_clone)).await??;
    if args.prepare_only {
        eprintln!(
            "conformance: prepared after {:.0?} (--prepare-only)",
            started.elapsed()
        );
        return Ok(ExitCode::SUCCESS);
    }

    let nodes = node_names(args.nodes);
    eprintln!(
        "conformance: [4/6] the quickstart cluster with edge node(s) {}",
        nodes.join(", ")
    );
    let commit = git_describe();
    let bin_dir = local::build_bins(false)?;
    let cp = crate::control_plane::up(&ControlPlaneConfig {
        front_bin_dir: Some(bin_dir.clone()),
        ..cp_config.clone()
    })
    .await?;
    let dir = quickstart::run_dir();
    let options = if nodes.len() > 1 {
        local::extra_edges::host_node_options()
    } else {
        local::StartOptions::default()
    };
    let verge = local::start_with(&dir, &bin_dir, &cp, NODE_NAME, &options).await?;
    let node_timeout = Duration::from_secs(args.node_timeout_secs);
    if nodes.len() > 1 {
        let images: Vec<&str> = images::IMAGES
            .iter()
            .map(|i| i.reference)
            .chain([verge_testkit::docker::TEST_IMAGE])
            .collect();
        let extra =
            local::extra_edges::start(&dir, &bin_dir, &cp, &verge, &nodes[1..], &images).await?;
        verge.wait_ready(&cp, node_timeout).await?;
        extra.wait_ready(&cp, NODE_NAME, node_timeout).await?;
    } else {
        verge.wait_ready(&cp, node_timeout).await?;
    }

    eprintln!("conformance: [5/6] e2e.test");
    let kubeconfig = cp.kubeconfig().to_owned();
    let kubectl = cp_config.kubectl();
    let timeout = Duration::from_secs(args.timeout_mins * 60);
    let run_clone = e2e_run.clone();
    let run_started = Instant::now();
    let outcome =
        tokio::task::spawn_blocking(move || run_clone.run(&kubeconfig, &kubectl, timeout)).await?;
    let duration = run_started.elapsed();

    if !args.keep {
        eprintln!("conformance: stopping the cluster (--keep leaves it up)");
        crate::down::run(crate::down::Args {}).await?;
    }
    let cases = outcome?;

    let info = report::RunInfo {
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        version: e2e.version.clone(),
        focus: if args.subset {
            format!("the CI subset ({} specs)", subset::SPECS.len())
        } else {
            focus
        },
        duration,
        commit,
        suite: args.suite,
        nodes,
    };
    std::fs::write(e2e_run.info_path(), serde_json::to_vec_pretty(&info)?)?;
    write(&args, &e2e_run, &info, &selected, &cases, started)
}

/// Writes the document of the run `info` (its report's `cases` over the `selected` specs)
/// and says what it found; exit code 0 when nothing failed.
fn write(
    args: &Args,
    e2e_run: &run::E2eRun,
    info: &report::RunInfo,
    selected: &[run::SelectedSpec],
    cases: &[junit::SpecResult],
    started: Instant,
) -> anyhow::Result<ExitCode> {
    let summary = report::Summary::new(selected, cases, &e2e_run.selection);
    let output = match (&args.output, args.subset) {
        (Some(output), _) => output.clone(),
        (None, true) => e2e_run.out_dir.join("subset.md"),
        (None, false) => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(info.suite.document()),
    };
    std::fs::write(
        &output,
        report::markdown(info, &e2e_run.selection, &summary),
    )?;
    eprintln!(
        "conformance: [6/6] {} selected: {} passed, {} failed, {} excluded, {} skipped or not \
         reached; written to {} (report {}) after {:.0?}",
        summary.total(),
        summary.passed.len(),
        summary.failed.len(),
        summary.excluded.len(),
        summary.skipped.len(),
        output.display(),
        e2e_run.report_path().display(),
        started.elapsed()
    );
    for (spec, reason) in &summary.failed {
        eprintln!("conformance: FAILED {spec}: {reason}");
    }
    Ok(
        if summary.failed.is_empty() && summary.suite_failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

/// `git describe --always --dirty` of the workspace (`unknown` outside a git checkout).
fn git_describe() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}
