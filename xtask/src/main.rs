//! `cargo xtask`: developer tasks for the Verge workspace.
//!
//! Layout: one module per subcommand — [`control_plane`] (`control-plane up|down|env|status`),
//! [`jaeger`] (`jaeger up|down|status`),
//! [`test`](mod@test) (the whole test suite on the real components), [`quickstart`] and [`down`] (a
//! local deployment running a sample Deployment on an edge node), [`bench`](mod@bench) (benchmarks),
//! [`fuzz`] (the fuzz targets of `fuzz/`, each for a bounded time), [`images`] (container
//! images of the services), [`conformance`] (Kubernetes' node-conformance and conformance
//! specs against edge nodes, docs/node-conformance.md and docs/conformance.md), [`api`] (buf lint and breaking, docs/api.md); [`local`] starts and stops the Verge processes for quickstart and
//! benchmarks; [`deny`] (`deny`, also a static check of `test`: the
//! dependency policy of `deny.toml`, with the pinned cargo-deny installed when missing).

// A developer tool, not a Verge process: its tasks end with its runtime; clippy.toml forbids
// bare spawns in production code only.
#![allow(clippy::disallowed_methods)]

mod api;
mod bench;
mod conformance;
mod control_plane;
mod deny;
mod down;
mod fuzz;
mod images;
mod jaeger;
mod local;
mod quickstart;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Developer tasks for the Verge workspace.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Manage the local Kubernetes control plane used by tests and the quickstart.
    ControlPlane(control_plane::Args),
    /// Manage the local Jaeger (traces) used by tests and the quickstart.
    Jaeger(jaeger::Args),
    /// Run the whole test suite against the real components (packages, Docker,
    /// control plane), then stop the control plane.
    Test(test::Args),
    /// Start a local Verge deployment: control plane, cloud services and an edge node.
    Quickstart(quickstart::Args),
    /// Stop what `quickstart` started.
    Down(down::Args),
    /// Run a benchmark (figures against a baseline measured in the same run).
    Bench(bench::Args),
    /// Build the fuzz targets (stable Rust, libFuzzer) and run each for a bounded time;
    /// fails on the first crash, naming the reproducer (docs/fuzzing.md).
    Fuzz(fuzz::Args),
    /// Build the container images `verge/<binary>:<tag>` (static binaries FROM scratch,
    /// non-root) in the local Docker engine; print their sizes; optionally `docker save` them.
    Images(images::Args),
    /// Run Kubernetes' own e2e specs of the pinned release against the quickstart cluster's
    /// edge nodes: `--suite node-conformance` (docs/node-conformance.md) or `--suite
    /// conformance` (docs/conformance.md).
    Conformance(conformance::Args),
    /// The protobuf API as a contract: `check` (buf lint, buf breaking against the previous
    /// release, docs/api.md up to date) and `docs` (regenerate docs/api.md).
    Api(api::Args),
    /// Check the dependency policy of deny.toml (`cargo deny --offline check licenses bans
    /// sources`), installing the pinned cargo-deny first when it is missing.
    Deny,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::ControlPlane(args) => control_plane::run(args).await,
        Command::Jaeger(args) => jaeger::run(args).await,
        Command::Test(args) => test::run(args).await,
        Command::Quickstart(args) => quickstart::run(args).await,
        Command::Down(args) => down::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Fuzz(args) => fuzz::run(args).await,
        Command::Images(args) => images::run(args).await,
        Command::Conformance(args) => conformance::run(args).await,
        Command::Api(args) => tokio::task::spawn_blocking(move || api::run(&args))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("xtask api panicked: {e}"))),
        Command::Deny => tokio::task::spawn_blocking(deny::run)
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("xtask deny panicked: {e}"))),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
