//! Building the binaries a local deployment runs: the workspace's binaries (release, with
//! edgecore in its size-optimised profile) and where each is found.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The cargo profile of edgecore wherever the other binaries are built with `release`:
/// Cargo.toml's `[profile.edge]`, the release profile optimised for size throughout (its text
/// is most of its resident memory), with fat LTO and one codegen unit.
pub const EDGE_PROFILE: &str = "edge";

/// The cargo profile edgecore is built with when the other binaries use `profile`.
pub fn edgecore_profile(profile: &str) -> &str {
    if profile == "release" {
        EDGE_PROFILE
    } else {
        profile
    }
}

/// The features that turn on the test targets needing real components (Docker, the control
/// plane, mosquitto, Jaeger, Go builds), one per crate that has such targets; plain `cargo
/// test --workspace` runs without them. `cargo xtask test` passes them to clippy, the build
/// and `cargo test`, and [`build_bins`] to its workspace build, so that the libraries are
/// built once with one set of features.
pub const REAL_COMPONENTS: &str = "verge-edgecore/real-components,\
    verge-edgecontroller/real-components,verge-devicecontroller/real-components,\
    verge-testkit/real-components,verge-e2e/real-components";

/// `cargo build --workspace --bins` (release with `release`, and then edgecore with
/// [`EDGE_PROFILE`]); returns the binaries' dir, where [`binary`] finds each.
pub fn build_bins(release: bool) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut builds = vec![vec![
        "build",
        "--workspace",
        "--bins",
        "--features",
        REAL_COMPONENTS,
    ]];
    if release {
        builds[0].push("--release");
        builds.push(vec![
            "build",
            "--profile",
            EDGE_PROFILE,
            "--package",
            "verge-edgecore",
            "--bin",
            "edgecore",
        ]);
    }
    for args in builds {
        let status = Command::new(&cargo)
            .args(&args)
            .status()
            .context("running cargo build")?;
        if !status.success() {
            bail!("cargo {} failed: {status}", args.join(" "));
        }
    }
    let debug_dir = std::env::current_exe()?
        .parent()
        .context("xtask has no parent directory")?
        .to_owned();
    Ok(if release {
        debug_dir.with_file_name("release")
    } else {
        debug_dir
    })
}

/// The path of binary `name` that [`build_bins`] built into `bin_dir`: a release build's
/// edgecore is in the [`EDGE_PROFILE`] directory beside it.
pub fn binary(bin_dir: &Path, name: &str) -> PathBuf {
    match bin_dir.file_name() {
        Some(dir) if name == "edgecore" && dir == "release" => {
            bin_dir.with_file_name(EDGE_PROFILE).join(name)
        }
        _ => bin_dir.join(name),
    }
}
