//! The dependency policy of `deny.toml` (licenses, duplicate versions, sources), checked by
//! cargo-deny at the version pinned here, which [`ensure_installed`] installs from crates.io
//! when it is missing: `cargo xtask deny`, and `cargo xtask test` among its static checks.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::Instant;

use anyhow::{Context as _, bail};

/// The pinned cargo-deny release (`cargo install cargo-deny --version … --locked`).
pub const CARGO_DENY_VERSION: &str = "0.20.2";

/// The checks `cargo xtask test` runs. Not `advisories`: its database is fetched from
/// outside crates.io, which this project's machines cannot reach.
pub const CHECKS: [&str; 3] = ["licenses", "bans", "sources"];

/// The workspace root, where `deny.toml` is.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_owned)
}

/// The cargo that runs xtask (`$CARGO`), else the one on `PATH`.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The version `cargo deny --version` reports (`cargo-deny 0.20.2`), or `None` when cargo
/// finds no `cargo-deny`.
pub fn installed_version() -> Option<String> {
    let output = cargo().args(["deny", "--version"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .nth(1)
        .map(str::to_owned)
}

/// Installs cargo-deny [`CARGO_DENY_VERSION`] with `cargo install --locked` unless `cargo
/// deny --version` reports that version already. A first install compiles for several
/// minutes; cargo's own progress shows meanwhile. Blocks.
///
/// # Errors
/// `cargo install` fails, or the installed cargo-deny still reports another version.
pub fn ensure_installed() -> anyhow::Result<()> {
    let found = installed_version();
    if found.as_deref() == Some(CARGO_DENY_VERSION) {
        return Ok(());
    }
    match &found {
        Some(v) => eprintln!(
            "xtask: cargo-deny {v} found, {CARGO_DENY_VERSION} pinned: installing it \
             (`cargo install cargo-deny --version {CARGO_DENY_VERSION} --locked`, a few minutes)"
        ),
        None => eprintln!(
            "xtask: cargo-deny missing: installing {CARGO_DENY_VERSION} \
             (`cargo install cargo-deny --version {CARGO_DENY_VERSION} --locked`; it compiles \
             for a few minutes, once)"
        ),
    }
    let started = Instant::now();
    let status = cargo()
        .args([
            "install",
            "cargo-deny",
            "--version",
            CARGO_DENY_VERSION,
            "--locked",
        ])
        .status()
        .context("running cargo install cargo-deny")?;
    if !status.success() {
        bail!("cargo install cargo-deny --version {CARGO_DENY_VERSION} failed: {status}");
    }
    match installed_version() {
        Some(v) if v == CARGO_DENY_VERSION => {
            eprintln!(
                "xtask: cargo-deny {v} installed in {:.0?}",
                started.elapsed()
            );
            Ok(())
        }
        other => bail!(
            "cargo-deny {CARGO_DENY_VERSION} installed, but `cargo deny --version` reports {}: \
             is another cargo-deny earlier on PATH?",
            other.as_deref().unwrap_or("nothing")
        ),
    }
}

/// `cargo deny --offline check licenses bans sources` on the workspace with its `deny.toml`,
/// after [`ensure_installed`] and a `cargo fetch` (crates.io only; it prints nothing when
/// every crate is downloaded already), so that the offline run finds every crate's manifest
/// and license files. `--offline` keeps cargo-deny from fetching anything else (advisory
/// databases, std-replacement data).
///
/// # Errors
/// cargo-deny cannot be installed, or a command cannot be started; a failing fetch or check
/// is the returned status.
pub fn check() -> anyhow::Result<ExitStatus> {
    ensure_installed()?;
    let root = workspace_root();
    let manifest = root.join("Cargo.toml");
    let fetch = cargo()
        .arg("fetch")
        .arg("--manifest-path")
        .arg(&manifest)
        .status()
        .context("running cargo fetch")?;
    if !fetch.success() {
        return Ok(fetch);
    }
    cargo()
        .arg("deny")
        .arg("--offline")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--config")
        .arg(root.join("deny.toml"))
        .arg("check")
        .args(CHECKS)
        .current_dir(&root)
        .status()
        .context("running cargo deny check")
}

/// `cargo xtask deny`: [`check`], its exit code.
///
/// # Errors
/// As [`check`].
pub fn run() -> anyhow::Result<ExitCode> {
    let status = check()?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}
