//! `cargo xtask test`: the whole test suite against the real components.
//!
//! Steps, each failing the run with its exit code:
//! 1. the static checks (fast, they fail early): `cargo fmt --check`, the dependency policy
//!    of `deny.toml` (`cargo deny --offline check licenses bans sources`; the pinned
//!    cargo-deny is installed first when missing, [`crate::deny`]), `cargo clippy --workspace
//!    --all-targets -- -D warnings`, `cargo doc --no-deps` with rustdoc warnings denied;
//! 2. missing Debian packages, Docker and the test image;
//! 3. `cargo build --workspace --bins`, and beside it on a second thread the Go builds, each
//!    cached after its first run: the control plane, the kubelet node (kubelet, kube-proxy,
//!    containerd), Jaeger, the OCI registry, buf with protoc-gen-doc, and the example
//!    controllers of `examples/` (Go and Python, generated from `proto/`);
//! 4. the API contract (`cargo xtask api check`: buf lint, buf breaking against the previous
//!    release, docs/api.md up to date), then the control plane and Jaeger started;
//! 5. `cargo test --workspace --all-targets` with the features that turn on the test targets
//!    against real components ([`crate::local::REAL_COMPONENTS`]; plain `cargo test
//!    --workspace` leaves them out) and `VERGE_STATE_DIR` and `KUBECONFIG` exported:
//!    every test but those named [`LAST`], then those. Meanwhile a low-priority thread builds
//!    the deployment images (`cargo xtask images --profile images-test`; the [`LAST`] tests
//!    import them and wait for them), the conformance binary and images, and the fuzz
//!    targets, so a cold run spends the time the tests wait (for pods, for partitions to
//!    heal) compiling;
//! 6. the kubelet node stopped if a test left it running, Jaeger (unless it ran before, e.g.
//!    the quickstart's) and the control plane;
//! 7. the node conformance subset: Kubernetes' own `[NodeConformance]` specs of each area on
//!    the quickstart cluster (`cargo xtask conformance --subset`; its e2e binary and images
//!    are built in step 5's background thread);
//! 8. a short fuzz pass: every target of `fuzz/` for 10 s, built for libFuzzer on stable.

use std::process::{Command, ExitCode, ExitStatus};

mod background;

use anyhow::Context as _;
use background::{Background, Step};
use verge_testkit::jaeger::JaegerConfig;
use verge_testkit::{ControlPlaneConfig, KubeletNodeConfig};

/// Arguments of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Leave the control plane and Jaeger running afterwards.
    #[arg(long)]
    keep_control_plane: bool,
    /// Skip the static checks (fmt, cargo-deny, clippy, doc), e.g. when re-running one test.
    #[arg(long)]
    skip_static_checks: bool,
    /// Skip the closing fuzz pass (`cargo xtask fuzz --seconds 10`).
    #[arg(long)]
    skip_fuzz: bool,
    /// Skip the node conformance subset (`cargo xtask conformance --subset`).
    #[arg(long)]
    skip_conformance: bool,
    /// Extra arguments for `cargo test` (after `--`, e.g. `-- -p verge-core`; a `-p`
    /// replaces `--workspace`).
    #[arg(last = true)]
    cargo_args: Vec<String>,
}

/// Node-name prefixes of the edge nodes the tests start (`verge-e2e` and the edged tests).
const TEST_NODE_PREFIXES: [&str; 2] = ["e2e-", "edge-test-"];

/// Removes the containers and pod networks of test edge nodes ([`TEST_NODE_PREFIXES`]).
fn remove_test_leftovers() {
    match verge_testkit::docker::remove_managed_containers(|n| {
        TEST_NODE_PREFIXES.iter().any(|p| n.starts_with(p))
    }) {
        Ok(0) => {}
        Ok(n) => eprintln!("xtask test: removed {n} containers left by test edge nodes"),
        Err(e) => eprintln!("xtask test: warning: removing test containers: {e:#}"),
    }
}

/// Runs the suite; returns the first failing step's exit code.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.skip_static_checks {
        let code = static_checks()?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    eprintln!("xtask test: checking Debian packages, Docker and the test image");
    crate::local::ensure_host().await?;
    // What a run that was killed left (its clean-up below never ran): a test node's pod
    // network keeps its pod CIDR, which the fresh control plane hands to another node, whose
    // network Docker then refuses ("Pool overlaps with other one").
    remove_test_leftovers();

    // The Go builds (each cached after its first run) go beside `cargo build`: on a cold
    // machine their module downloads and cargo's serial phases overlap.
    let config = ControlPlaneConfig::from_env();
    let node = KubeletNodeConfig::from_env();
    let jaeger = JaegerConfig::from_env();
    let go = go_builds(&config, &node, &jaeger)?;
    eprintln!("xtask test: cargo build --workspace --bins");
    let build = crate::local::build_bins(false);
    eprintln!("xtask test: waiting for the Go builds");
    let go = go.join();
    build?;
    go?;
    eprintln!("xtask test: the protobuf API contract (`cargo xtask api check`)");
    let code = crate::api::check(&verge_testkit::proto_tools::ProtoTools::from_env())?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }

    let cp = crate::control_plane::up(&config).await?;
    // A Jaeger that already ran (the quickstart's, or one started by hand) is reused and
    // left running.
    let jaeger_was_running = jaeger.status().await?.is_some();
    crate::jaeger::up(&jaeger).await?;

    // The images (for the tests named `as_workloads`, which run last) and the fuzz build
    // (for the closing pass) are built at low priority while the other tests run.
    let fuzz = !args.skip_fuzz && args.cargo_args.is_empty();
    let conformance = !args.skip_conformance && args.cargo_args.is_empty();
    let later = Background::spawn(
        "images, conformance, fuzz",
        true,
        later_builds(fuzz, conformance),
    )?;
    let code = run_tests(&cp, &args.cargo_args);
    let later = later.join();
    // Each test removes its edge node's containers when it ends; a container whose creation
    // raced with that clean-up would otherwise outlive the run.
    remove_test_leftovers();

    // A test that failed half-way may leave the kubelet node running; it must stop before
    // the control plane it is attached to.
    match node.down().await {
        Ok(true) => eprintln!("xtask test: kubelet node stopped"),
        Ok(false) => {}
        Err(e) => eprintln!("xtask test: warning: stopping the kubelet node: {e:#}"),
    }
    if args.keep_control_plane || jaeger_was_running {
        eprintln!("xtask test: Jaeger left running (`cargo xtask jaeger down`)");
    } else {
        match crate::jaeger::down(&jaeger).await {
            Ok(_) => eprintln!("xtask test: Jaeger stopped"),
            Err(e) => eprintln!("xtask test: warning: stopping Jaeger: {e:#}"),
        }
    }
    if args.keep_control_plane {
        eprintln!("xtask test: control plane left running (`cargo xtask control-plane down`)");
    } else {
        crate::control_plane::down(&config).await?;
        eprintln!("xtask test: control plane stopped");
    }
    let code = code?;
    if let Err(e) = later {
        eprintln!("xtask test: {e:#}");
        return Ok(ExitCode::FAILURE);
    }
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    if conformance {
        let code = conformance_subset().await?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    if !fuzz {
        return Ok(code);
    }
    eprintln!("xtask test: fuzz pass, {FUZZ_SECONDS} s per target (`cargo xtask fuzz`)");
    crate::fuzz::short_pass(FUZZ_SECONDS).await
}

/// The Go components the tests need, each built once into its cache: the control plane,
/// the kubelet node's kubelet, kube-proxy and containerd, Jaeger, metrics-server (and its
/// image), and the API tools.
fn go_builds(
    config: &ControlPlaneConfig,
    node: &KubeletNodeConfig,
    jaeger: &JaegerConfig,
) -> anyhow::Result<Background> {
    let (cp1, cp2, node, jaeger) = (config.clone(), config.clone(), node.clone(), jaeger.clone());
    let steps: Vec<Step> = vec![
        (
            "control plane (Kubernetes Go modules)",
            Box::new(move || cp1.ensure_built()),
        ),
        (
            "kubelet node for the deployment tests (kubelet, kube-proxy, containerd)",
            Box::new(move || node.ensure_built(&cp2)),
        ),
        (
            "Jaeger for the tracing tests",
            Box::new(move || jaeger.ensure_built()),
        ),
        (
            "the OCI registry for the image tests (distribution)",
            Box::new(|| verge_testkit::registry::RegistryConfig::from_env().ensure_built()),
        ),
        (
            "metrics-server for the resource-metrics tests",
            Box::new(|| {
                verge_testkit::metrics_server::MetricsServerConfig::default().ensure_image()
            }),
        ),
        (
            "buf and protoc-gen-doc for the API contract",
            Box::new(|| verge_testkit::proto_tools::ProtoTools::from_env().ensure_built()),
        ),
        (
            "the example controllers (examples/go-controller, examples/python-controller)",
            Box::new(|| {
                use verge_testkit::example_clients::Example;
                Example::Go.ensure_built()?;
                Example::Python.ensure_built().map(drop)
            }),
        ),
    ];
    Background::spawn("go builds", false, steps)
}

/// Minutes the conformance subset may run (`--ginkgo.timeout`); it takes a few.
const CONFORMANCE_TIMEOUT_MINS: u64 = 20;

/// The conformance subset on the quickstart cluster, which it starts and stops
/// (`cargo xtask conformance --subset`): Kubernetes' own specs of each area edged and the
/// edge network cover.
async fn conformance_subset() -> anyhow::Result<ExitCode> {
    eprintln!("xtask test: conformance subset (`cargo xtask conformance --subset`)");
    crate::conformance::run(crate::conformance::Args {
        suite: crate::conformance::Suite::Conformance,
        focus: None,
        subset: true,
        keep: false,
        timeout_mins: CONFORMANCE_TIMEOUT_MINS,
        output: None,
        prepare_only: false,
        from_report: false,
        procs: 4,
        node_timeout_secs: 120,
        nodes: 1,
    })
    .await
}

/// The images the deployment tests run on the kit's kubelet node (`--profile images-test`;
/// an import waits for them through [`verge_testkit::docker::ImagesLock`]), then, with
/// `conformance`, the conformance e2e binary and images, and with `fuzz`, the instrumented
/// fuzz targets.
fn later_builds(fuzz: bool, conformance: bool) -> Vec<Step> {
    let mut steps: Vec<Step> = vec![(
        "cargo xtask images --profile images-test (static binaries, FROM scratch)",
        Box::new(|| {
            let images = crate::images::Args {
                tag: env!("CARGO_PKG_VERSION").to_owned(),
                save: None,
                profile: "images-test".to_owned(),
            };
            for built in crate::images::build_all(&images)? {
                eprintln!(
                    "xtask test: {} ({:.1} MB)",
                    built.reference,
                    crate::images::megabytes(built.size)
                );
            }
            Ok(())
        }),
    )];
    if conformance {
        steps.push((
            "conformance: e2e.test, agnhost and the e2e images (cached after the first run)",
            Box::new(crate::conformance::prepare),
        ));
    }
    if fuzz {
        steps.push((
            "fuzz targets (instrumented build for the closing pass)",
            Box::new(crate::fuzz::build_all_targets),
        ));
    }
    steps
}

/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SECONDS: u64 = 10;

/// One static check: what is printed, and how it runs.
type Check = (&'static str, Box<dyn Fn() -> anyhow::Result<ExitStatus>>);

/// `cargo <args>`, with `RUSTDOCFLAGS` when given; its exit status.
fn cargo_status(args: &[&str], rustdocflags: Option<&str>) -> anyhow::Result<ExitStatus> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(args);
    if let Some(flags) = rustdocflags {
        cmd.env("RUSTDOCFLAGS", flags);
    }
    Ok(cmd.status()?)
}

/// `cargo fmt --all --check`; the dependency policy of `deny.toml` (`cargo deny --offline
/// check licenses bans sources`, installing the pinned cargo-deny first when it is missing,
/// [`crate::deny`]); `cargo clippy --workspace --all-targets -- -D warnings` with
/// [`crate::local::REAL_COMPONENTS`]; `cargo doc
/// --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`. Stops at the first failure and
/// returns its exit code.
fn static_checks() -> anyhow::Result<ExitCode> {
    let steps: [Check; 4] = [
        (
            "cargo fmt --all --check",
            Box::new(|| cargo_status(&["fmt", "--all", "--check"], None)),
        ),
        (
            "cargo deny --offline check licenses bans sources (deny.toml)",
            Box::new(crate::deny::check),
        ),
        (
            "cargo clippy --workspace --all-targets --features <real components> -- -D warnings",
            Box::new(|| {
                cargo_status(
                    &[
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--features",
                        crate::local::REAL_COMPONENTS,
                        "--",
                        "-D",
                        "warnings",
                    ],
                    None,
                )
            }),
        ),
        (
            "cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings)",
            Box::new(|| cargo_status(&["doc", "--workspace", "--no-deps"], Some("-D warnings"))),
        ),
    ];
    for (what, run) in steps {
        eprintln!("xtask test: {what}");
        let status = run().with_context(|| format!("running {what}"))?;
        if !status.success() {
            eprintln!("xtask test: {what} failed: {status}");
            return Ok(exit_code(status));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Tests whose name contains this run last, in a second `cargo test` over the same build:
/// they need the images the background step builds (the cloud side deployed on the kit's
/// kubelet node).
pub const LAST: &str = "as_workloads";

/// `cargo test --workspace --all-targets` twice over one build: every test but [`LAST`]'s,
/// then [`LAST`]'s; with extra arguments, once with those (`--all-targets` unless they
/// name targets, `--workspace` unless they name a package). Returns the first failing exit
/// code.
fn run_tests(cp: &verge_testkit::ControlPlane, extra: &[String]) -> anyhow::Result<ExitCode> {
    let phases: Vec<Vec<&str>> = if extra.is_empty() {
        vec![vec!["--", "--skip", LAST], vec!["--", LAST]]
    } else {
        vec![extra.iter().map(String::as_str).collect()]
    };
    // `-p <pkg>` in the extra arguments narrows the run instead of `--workspace`.
    let narrowed = extra
        .iter()
        .any(|a| a.starts_with("-p") || a.starts_with("--package"));
    // `--test <name>`, `--lib` and the like choose targets instead of `--all-targets`.
    let targeted = extra.iter().any(|a| {
        [
            "--test",
            "--lib",
            "--bin",
            "--bins",
            "--tests",
            "--example",
            "--bench",
            "--doc",
        ]
        .contains(&a.as_str())
    });
    let mut first_failure = ExitCode::SUCCESS;
    for phase in phases {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut test = Command::new(&cargo);
        test.arg("test");
        if !narrowed {
            test.arg("--workspace");
        }
        // Every test target of the selected packages, those against real components included
        // (plain `cargo test --workspace` leaves them out).
        if let Some(features) = real_component_features(extra, narrowed) {
            test.args(["--features", &features]);
        }
        // Run every test binary even after a failure, so one run shows every failing test.
        if !targeted {
            test.arg("--all-targets");
        }
        test.arg("--no-fail-fast")
            .args(phase)
            .env("VERGE_STATE_DIR", cp.state_dir())
            .env("KUBECONFIG", cp.kubeconfig());
        eprintln!("xtask test: {test:?}");
        let status = test.status().context("running cargo test")?;
        if !status.success() && first_failure == ExitCode::SUCCESS {
            first_failure = exit_code(status);
        }
    }
    Ok(first_failure)
}

/// The `--features` value that turns on the real-component test targets of the packages a
/// run selects: all of [`crate::local::REAL_COMPONENTS`] for the workspace, those of the
/// `-p`/`--package` arguments in `extra` when `narrowed` (cargo refuses a feature of a
/// package it was not asked for); `None` when no selected package has such targets.
fn real_component_features(extra: &[String], narrowed: bool) -> Option<String> {
    let all = crate::local::REAL_COMPONENTS.split(',');
    if !narrowed {
        return Some(all.collect::<Vec<_>>().join(","));
    }
    let mut selected = Vec::new();
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let package = match arg.as_str() {
            "-p" | "--package" => args.next().map(String::as_str),
            other => other
                .strip_prefix("--package=")
                .or_else(|| other.strip_prefix("-p")),
        };
        selected.extend(package.filter(|p| !p.is_empty()));
    }
    let features: Vec<&str> = all
        .filter(|f| selected.iter().any(|p| f.split('/').next() == Some(*p)))
        .collect();
    (!features.is_empty()).then(|| features.join(","))
}

/// The process exit code of `status` (1 when killed by a signal).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::real_component_features;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_workspace_gets_every_real_component_feature() {
        let all = real_component_features(&[], false).expect("features");
        assert_eq!(all.split(',').count(), 5, "{all}");
        assert!(all.contains("verge-e2e/real-components"));
    }

    #[test]
    fn a_narrowed_run_gets_the_features_of_its_packages_only() {
        let edge = args(&["-p", "verge-edgecore", "--test", "outbox"]);
        assert_eq!(
            real_component_features(&edge, true).as_deref(),
            Some("verge-edgecore/real-components")
        );
        let two = args(&["--package=verge-e2e", "-pverge-testkit"]);
        assert_eq!(
            real_component_features(&two, true).as_deref(),
            Some("verge-testkit/real-components,verge-e2e/real-components")
        );
        assert_eq!(
            real_component_features(&args(&["-p", "verge-core"]), true),
            None
        );
    }
}
