//! `cargo xtask api`: the protobuf API as a contract (architecture.md §11).
//!
//! * `check`: `buf lint` with `proto/buf.yaml`'s rules, `buf breaking` against the API
//!   baseline (the previous release tag `v*`, else the first commit that has `proto/`;
//!   [`verge_testkit::proto_tools::baseline`]) and `docs/api.md` compared with what the
//!   `.proto` comments generate. Each failure prints buf's findings or the way to fix it.
//!   `cargo xtask test` runs it after the Go builds.
//! * `docs`: writes `docs/api.md` (protoc-gen-doc with `proto/api.md.tmpl`).
//!
//! buf and protoc-gen-doc are built from their Go modules on first use and cached
//! ([`verge_testkit::proto_tools::ProtoTools`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use verge_testkit::proto_tools::{self, ProtoTools};

/// Arguments of `cargo xtask api`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Lint, breaking-change check against the baseline, and docs/api.md up to date.
    Check,
    /// Regenerate docs/api.md from the .proto comments.
    Docs,
}

/// The workspace root (xtask's parent directory).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Runs the action; `check` returns failure when any check fails.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let tools = ProtoTools::from_env();
    tools.ensure_built()?;
    match args.action {
        Action::Check => check(&tools),
        Action::Docs => {
            let root = repo_root();
            let docs = tools.api_docs(&root.join("proto"))?;
            let path = root.join("docs/api.md");
            std::fs::write(&path, docs).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("xtask api: wrote {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The three checks of `cargo xtask api check`; every one runs, each failure is printed.
pub fn check(tools: &ProtoTools) -> anyhow::Result<ExitCode> {
    let root = repo_root();
    let proto = root.join("proto");
    let mut ok = true;

    match tools.lint(&proto)? {
        Ok(()) => eprintln!("xtask api: buf lint: ok"),
        Err(findings) => {
            ok = false;
            eprintln!("xtask api: buf lint found problems (rules in proto/buf.yaml):\n{findings}");
        }
    }

    let baseline = proto_tools::baseline(&root)?;
    match tools.breaking(&proto, &baseline.proto_dir)? {
        Ok(()) => eprintln!(
            "xtask api: buf breaking against {}: no breaking change",
            baseline.reference
        ),
        Err(findings) => {
            ok = false;
            eprintln!(
                "xtask api: buf breaking against {} found breaking changes (a v1 package never \
                 breaks; put the change in a new package):\n{findings}",
                baseline.reference
            );
        }
    }

    let generated = tools.api_docs(&proto)?;
    let path = root.join("docs/api.md");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current == generated {
        eprintln!("xtask api: docs/api.md matches the .proto files");
    } else {
        ok = false;
        eprintln!(
            "xtask api: docs/api.md is stale: it does not match the .proto comments; run \
             `cargo xtask api docs` and commit the result"
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
