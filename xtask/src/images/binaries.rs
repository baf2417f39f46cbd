//! The release binaries of the images, statically linked against glibc: `cargo build
//! --release --target <host gnu triple>` with `-C target-feature=+crt-static` for the
//! target only (build scripts and proc macros stay dynamic), then a check of each ELF file.
//!
//! Name resolution in these binaries (glibc 2.36 of Debian 12, checked in a `FROM scratch`
//! container): IP addresses need none; `/etc/hosts` and DNS through `/etc/resolv.conf` work
//! (the container runtime provides both files; search domains and `ndots` as usual), so
//! Service names resolve in a pod. Other NSS sources (mDNS, `nss-resolve`, LDAP) do not: a
//! static glibc cannot load NSS modules from the image, which has none. On a host, a static
//! glibc binary loads the host's NSS modules, which must come from the same glibc version:
//! install a normal (dynamic) build of edgecore on edge hosts, not the one from the image.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use object::elf;
use object::read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _};

/// The packages whose binaries become images.
pub const PACKAGES: [&str; 6] = [
    "verge-cloudhub",
    "verge-edgecontroller",
    "verge-devicecontroller",
    "verge-fleetcontroller",
    "verge-edgecore",
    "verge-virtual-mapper",
];

/// Prefixes of the variables `cargo run` sets for the program it runs.
const INHERITED_FROM_CARGO_RUN: [&str; 6] = [
    "CARGO_PKG_",
    "CARGO_MANIFEST_",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "OUT_DIR",
];

/// The rustc flags of the target code.
pub const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// The environment variable cargo reads target-only rustflags from for `triple`
/// (`CARGO_TARGET_<TRIPLE>_RUSTFLAGS`).
pub fn rustflags_var(triple: &str) -> String {
    format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        triple.to_uppercase().replace(['-', '.'], "_")
    )
}

/// Builds the binaries for `triple` (a `*-linux-gnu` host triple) with cargo profile `profile`
/// (`release` for the images users get, edgecore then with
/// [`crate::local::build::EDGE_PROFILE`]) in `target_dir`; cargo prints its progress. Returns the directory where [`path`] finds them.
///
/// # Errors
/// Not a glibc triple; cargo failing.
pub fn build(
    workspace: &Path,
    target_dir: &Path,
    triple: &str,
    profile: &str,
) -> anyhow::Result<PathBuf> {
    if !triple.ends_with("-linux-gnu") {
        bail!("static glibc binaries need a *-linux-gnu host, not {triple}");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // cargo takes RUSTFLAGS over the target's flags: fold a user's RUSTFLAGS into them.
    let mut flags = STATIC_RUSTFLAGS.to_owned();
    if let Ok(extra) = std::env::var("RUSTFLAGS") {
        flags.push(' ');
        flags.push_str(&extra);
    }
    let edge = crate::local::edgecore_profile(profile);
    let mut builds = vec![("--bins", profile)];
    if edge != profile {
        builds.push(("edgecore", edge));
    }
    for (what, profile) in builds {
        let mut cmd = Command::new(&cargo);
        // `cargo run` hands xtask its package's CARGO_PKG_*, CARGO_MANIFEST_* ... variables;
        // some build scripts (ring's) rerun when they change, so without them this build
        // reuses what a plain `cargo build` in a shell built, and the other way round.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if INHERITED_FROM_CARGO_RUN.iter().any(|p| name.starts_with(p)) {
                cmd.env_remove(&*name);
            }
        }
        cmd.current_dir(workspace)
            .args(["build", "--profile", profile, "--target", triple]);
        if what == "--bins" {
            cmd.arg("--bins")
                .args(PACKAGES.iter().flat_map(|p| ["-p", p]));
        } else {
            cmd.args(["-p", "verge-edgecore", "--bin", "edgecore"]);
        }
        cmd.arg("--target-dir")
            .arg(target_dir)
            .env(rustflags_var(triple), &flags)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS");
        let status = cmd.status().context("running cargo build")?;
        if !status.success() {
            bail!("cargo build of the static binaries failed: {status}");
        }
    }
    // cargo's output directory of the `dev` profile is `debug`; every other profile's is its name.
    let dir = if profile == "dev" { "debug" } else { profile };
    Ok(target_dir.join(triple).join(dir))
}

/// The path of image binary `bin` that [`build`] put in `dir`: a release build's edgecore is in
/// the [`crate::local::build::EDGE_PROFILE`] directory beside it.
pub fn path(dir: &Path, bin: &str) -> PathBuf {
    crate::local::binary(dir, bin)
}

/// How an ELF executable is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linking {
    /// No program interpreter: the kernel runs it without a dynamic loader.
    Static,
    /// Loaded by this interpreter (e.g. `/lib64/ld-linux-x86-64.so.2`).
    Dynamic(String),
}

/// Whether the 64-bit ELF file `data` asks for a program interpreter (`PT_INTERP`), as
/// `file` reports "dynamically linked".
///
/// # Errors
/// Not a 64-bit ELF file.
pub fn linking(data: &[u8]) -> anyhow::Result<Linking> {
    let file = ElfFile64::<object::Endianness>::parse(data).context("not a 64-bit ELF file")?;
    let endian = file.endian();
    let headers = file
        .elf_header()
        .program_headers(endian, data)
        .context("unreadable program headers")?;
    for header in headers {
        if header.p_type(endian) == elf::PT_INTERP {
            let interp = header
                .interpreter(endian, data)
                .context("unreadable PT_INTERP")?
                .unwrap_or_default();
            return Ok(Linking::Dynamic(
                String::from_utf8_lossy(interp).into_owned(),
            ));
        }
    }
    Ok(Linking::Static)
}

/// Fails unless the file at `path` is a static executable.
///
/// # Errors
/// It cannot be read, is not ELF, or names an interpreter.
pub fn check_static(path: &Path) -> anyhow::Result<()> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    match linking(&data).with_context(|| path.display().to_string())? {
        Linking::Static => Ok(()),
        Linking::Dynamic(interp) => bail!(
            "{} is dynamically linked (interpreter {interp}); it would not start FROM scratch",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_flags_variable() {
        assert_eq!(
            rustflags_var("x86_64-unknown-linux-gnu"),
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS"
        );
    }

    #[test]
    fn a_test_binary_is_dynamic() {
        // This test executable is an ordinary (dynamic) build: the check must see its loader.
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(&exe).expect("read");
        match linking(&data).expect("elf") {
            Linking::Dynamic(interp) => assert!(interp.contains("ld-linux"), "{interp}"),
            Linking::Static => panic!("{} looks static", exe.display()),
        }
        assert!(check_static(&exe).is_err());
    }

    #[test]
    fn not_elf_is_an_error() {
        assert!(linking(b"#!/bin/sh\necho hi\n").is_err());
    }

    #[test]
    fn only_gnu_triples() {
        let e = build(
            Path::new("."),
            Path::new("t"),
            "x86_64-unknown-linux-musl",
            "release",
        )
        .expect_err("musl refused");
        assert!(e.to_string().contains("linux-gnu"), "{e}");
    }
}
