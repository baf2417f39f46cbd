//! Building the fuzz targets on stable Rust, as `cargo fuzz build --sanitizer none` does.
//!
//! libFuzzer needs the code under test instrumented with LLVM's SanitizerCoverage. Every
//! flag for that is a stable `rustc` codegen option (`-C passes`, `-C llvm-args`), so no
//! nightly toolchain is needed; only the sanitizers themselves (`-Z sanitizer=address`) are
//! unstable, and the targets run without them: Rust's own checks (bounds, overflow, debug
//! assertions) and the targets' assertions are what turns a bug into a crash. libfuzzer-sys
//! compiles libFuzzer's C++ sources with the `cc` crate, so a C++ compiler must exist; on
//! Debian it is installed (`g++`) when missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The rustc flags of an instrumented build (cargo-fuzz's defaults without a sanitizer):
/// edge coverage with inline 8-bit counters and the PC table libFuzzer reads, comparison
/// tracing (libFuzzer learns the constants inputs are compared with), stack-depth tracing,
/// no branch folding (more distinct edges) and `cfg(fuzzing)`. Unlike cargo-fuzz, dead code
/// is not kept (`-Clink-dead-code` is for coverage reports; without it a target binary is a
/// fraction of the size). Debug assertions and overflow checks come from the
/// `[profile.release]` of `fuzz/Cargo.toml`.
pub const RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cllvm-args=-sanitizer-coverage-stack-depth",
    "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
    "--cfg=fuzzing",
];

/// The instrumented release build of the workspace `fuzz` for the host triple, into
/// `fuzz/target`: `cargo <subcommand> --release --target <host> ...`.
pub struct Build {
    fuzz: PathBuf,
    triple: String,
}

impl Build {
    /// Checks the toolchain (C++ compiler, host triple) for building in `fuzz`.
    ///
    /// # Errors
    /// No C++ compiler and none installable; `rustc -vV` failing.
    pub fn new(fuzz: &Path) -> anyhow::Result<Self> {
        ensure_cxx()?;
        Ok(Self {
            fuzz: fuzz.to_owned(),
            triple: host_triple()?,
        })
    }

    /// The directory of the built target binaries.
    pub fn bin_dir(&self) -> PathBuf {
        self.fuzz.join("target").join(&self.triple).join("release")
    }

    /// `cargo <subcommand>` with the manifest, profile, triple, target dir and flags.
    fn cargo(&self, subcommand: &str) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut rustflags = RUSTFLAGS.join(" ");
        if let Ok(extra) = std::env::var("RUSTFLAGS") {
            rustflags.push(' ');
            rustflags.push_str(&extra);
        }
        let mut cmd = Command::new(cargo);
        // `--target` keeps the flags away from build scripts and proc macros: cargo then
        // applies RUSTFLAGS to the target's code only, and builds host code without them.
        cmd.args([subcommand, "--release", "--manifest-path"])
            .arg(self.fuzz.join("Cargo.toml"))
            .args(["--target", &self.triple, "--target-dir"])
            .arg(self.fuzz.join("target"))
            .env("RUSTFLAGS", rustflags)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            // Lets build scripts know, as cargo-fuzz does.
            .env("CARGO_FUZZ", "1");
        cmd
    }

    /// Builds the binaries of `targets`. cargo prints its progress.
    ///
    /// # Errors
    /// cargo failing.
    pub fn targets(&self, targets: &[String]) -> anyhow::Result<()> {
        let mut cmd = self.cargo("build");
        for target in targets {
            cmd.args(["--bin", target]);
        }
        eprintln!(
            "xtask fuzz: building {} (instrumented, release, {}); the first build compiles \
             every dependency and takes several minutes",
            targets.join(", "),
            self.triple
        );
        run(cmd, "building the fuzz targets")
    }

    /// Runs the harness's unit tests (the seeds reach the paths they were made for), built
    /// with the same flags so that they reuse the fuzz build. With `write_seeds`, runs the
    /// ignored test that writes `fuzz/seeds/` instead.
    ///
    /// # Errors
    /// A failing test; cargo failing.
    pub fn harness_tests(&self, write_seeds: bool) -> anyhow::Result<()> {
        let mut cmd = self.cargo("test");
        cmd.args(["--lib", "--", "--test-threads=1"]);
        if write_seeds {
            cmd.args(["--ignored", "--exact", "tests::write_seeds"]);
        }
        eprintln!("xtask fuzz: cargo test --lib (the harness and its seeds)");
        run(cmd, "the fuzz harness tests")
    }
}

/// Runs `cmd`; an error naming `what` unless it succeeds.
fn run(mut cmd: Command, what: &str) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("{what}: running cargo"))?;
    if !status.success() {
        bail!("{what} failed: {status}");
    }
    Ok(())
}

/// The host's target triple, from `rustc -vV`.
///
/// # Errors
/// rustc cannot be run or prints no host.
pub fn host_triple() -> anyhow::Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_owned())
        .context("rustc -vV printed no host triple")
}

/// Makes sure the C++ compiler the `cc` crate will use (`$CXX`, else `c++`) runs; installs
/// Debian's `g++` when it does not.
fn ensure_cxx() -> anyhow::Result<()> {
    let cxx = std::env::var_os("CXX").unwrap_or_else(|| "c++".into());
    let runs = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return Ok(());
    }
    eprintln!(
        "xtask fuzz: no C++ compiler ({}) for libFuzzer; installing g++",
        cxx.to_string_lossy()
    );
    verge_testkit::packages::ensure_debian_packages(&["g++"])
        .context("installing g++ (libFuzzer is C++)")
}
