//! `cargo xtask test`: the whole test suite against the real components.
//!
//! Steps: the static checks first (they are fast and fail early): `cargo fmt --check`,
//! `cargo clippy --workspace --all-targets -- -D warnings` and `cargo doc --no-deps` with
//! rustdoc warnings denied; then install missing Debian packages, make sure Docker runs and
//! the test image exists, start the control plane, build the kubelet node's components
//! (once; cached), build (once; cached) and start Jaeger, `cargo build --workspace --bins`, `cargo xtask images`, then
//! `cargo test --workspace --all-targets` with `VERGE_STATE_DIR` and `KUBECONFIG`
//! exported, then stop the kubelet node if a test left it running, Jaeger (unless it ran
//! before, e.g. the quickstart's) and the control plane, then a short fuzz pass (every target of `fuzz/`
//! for 10 s, built for libFuzzer on stable). The exit code is the first failing step's.

use std::process::{Command, ExitCode};

use anyhow::Context as _;
use verge_testkit::jaeger::JaegerConfig;
use verge_testkit::{ControlPlaneConfig, KubeletNodeConfig};

/// Arguments of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Leave the control plane and Jaeger running afterwards.
    #[arg(long)]
    keep_control_plane: bool,
    /// Skip the static checks (fmt, clippy, doc), e.g. when re-running one test.
    #[arg(long)]
    skip_static_checks: bool,
    /// Skip the closing fuzz pass (`cargo xtask fuzz --seconds 10`).
    #[arg(long)]
    skip_fuzz: bool,
    /// Extra arguments for `cargo test` (after `--`, e.g. `-- -p verge-core`; a `-p`
    /// replaces `--workspace`).
    #[arg(last = true)]
    cargo_args: Vec<String>,
}

/// Node-name prefixes of the edge nodes the tests start (`verge-e2e` and the edged tests).
const TEST_NODE_PREFIXES: [&str; 2] = ["e2e-", "edge-test-"];

/// Runs the suite; returns `cargo test`'s exit code.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.skip_static_checks {
        let code = static_checks()?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    eprintln!("xtask test: checking Debian packages, Docker and the test image");
    crate::local::ensure_host().await?;

    let config = ControlPlaneConfig::from_env();
    let cp = crate::control_plane::up(&config).await?;
    // The deployment tests start the kit's kubelet node; its Go builds (kubelet, kube-proxy,
    // containerd) are a visible step here rather than minutes of silence inside a test.
    eprintln!("xtask test: kubelet node for the deployment tests (built once, then cached)");
    let node = KubeletNodeConfig::from_env();
    {
        let (node, config) = (node.clone(), config.clone());
        tokio::task::spawn_blocking(move || node.ensure_built(&config)).await??;
    }
    // The tracing tests query this Jaeger; its Go build is a visible step too. A Jaeger that
    // already ran (the quickstart's, or one started by hand) is reused and left running.
    eprintln!("xtask test: Jaeger for the tracing tests (built once, then cached)");
    let jaeger = JaegerConfig::from_env();
    let jaeger_was_running = jaeger.status().await?.is_some();
    crate::jaeger::up(&jaeger).await?;

    let code = build_and_test(&cp, &args.cargo_args);
    // Each test removes its edge node's containers when it ends; a container whose creation
    // raced with that clean-up would otherwise outlive the run.
    match verge_testkit::docker::remove_managed_containers(|n| {
        TEST_NODE_PREFIXES.iter().any(|p| n.starts_with(p))
    }) {
        Ok(0) => {}
        Ok(n) => eprintln!("xtask test: removed {n} containers left by test edge nodes"),
        Err(e) => eprintln!("xtask test: warning: removing test containers: {e:#}"),
    }

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
    if code != ExitCode::SUCCESS || args.skip_fuzz || !args.cargo_args.is_empty() {
        return Ok(code);
    }
    eprintln!("xtask test: fuzz pass, {FUZZ_SECONDS} s per target (`cargo xtask fuzz`)");
    crate::fuzz::short_pass(FUZZ_SECONDS).await
}

/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SECONDS: u64 = 10;

/// One static check: a cargo command line.
struct Check {
    /// As printed.
    what: &'static str,
    /// cargo's arguments.
    args: &'static [&'static str],
    /// `RUSTDOCFLAGS`, if set.
    rustdocflags: Option<&'static str>,
}

/// `cargo fmt --all --check`, `cargo clippy --workspace --all-targets -- -D warnings`,
/// `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`; stops at the first
/// failure and returns its exit code.
fn static_checks() -> anyhow::Result<ExitCode> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let steps = [
        Check {
            what: "cargo fmt --all --check",
            args: &["fmt", "--all", "--check"],
            rustdocflags: None,
        },
        Check {
            what: "cargo clippy --workspace --all-targets -- -D warnings",
            args: &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
            rustdocflags: None,
        },
        Check {
            what: "cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings)",
            args: &["doc", "--workspace", "--no-deps"],
            rustdocflags: Some("-D warnings"),
        },
    ];
    for Check {
        what,
        args,
        rustdocflags,
    } in steps
    {
        eprintln!("xtask test: {what}");
        let mut cmd = Command::new(&cargo);
        cmd.args(args);
        if let Some(flags) = rustdocflags {
            cmd.env("RUSTDOCFLAGS", flags);
        }
        let status = cmd.status().with_context(|| format!("running {what}"))?;
        if !status.success() {
            eprintln!("xtask test: {what} failed: {status}");
            return Ok(exit_code(status));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cargo build --workspace --bins`, then `cargo test --workspace --all-targets`.
fn build_and_test(cp: &verge_testkit::ControlPlane, extra: &[String]) -> anyhow::Result<ExitCode> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let env = [
        ("VERGE_STATE_DIR", cp.state_dir().as_os_str().to_owned()),
        ("KUBECONFIG", cp.kubeconfig().into_os_string()),
    ];
    eprintln!("xtask test: cargo build --workspace --bins");
    let build = Command::new(&cargo)
        .args(["build", "--workspace", "--bins"])
        .envs(env.clone())
        .status()
        .context("running cargo build")?;
    if !build.success() {
        eprintln!("xtask test: cargo build failed: {build}");
        return Ok(exit_code(build));
    }
    // The deployment tests run these images on the kit's kubelet node.
    eprintln!(
        "xtask test: cargo xtask images --profile images-test (static binaries, FROM scratch)"
    );
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
    // `-p <pkg>` in the extra arguments narrows the run instead of `--workspace`.
    let narrowed = extra
        .iter()
        .any(|a| a.starts_with("-p") || a.starts_with("--package"));
    let mut test = Command::new(&cargo);
    test.arg("test");
    if !narrowed {
        test.arg("--workspace");
    }
    // Run every test binary even after a failure, so one run shows every failing test.
    test.args(["--all-targets", "--no-fail-fast"])
        .args(extra)
        .envs(env);
    eprintln!("xtask test: {test:?}");
    let test = test.status().context("running cargo test")?;
    Ok(exit_code(test))
}

/// The process exit code of `status` (1 when killed by a signal).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}
