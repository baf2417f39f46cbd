//! The busybox the e2e images are made on: release 1.37, as upstream's `busybox:1.37.0-2`
//! image, built from busybox's own source with its default configuration, linked
//! statically. Its shell passes environment variables whose names are not shell identifiers
//! (`data-1`) on to its children, which the specs of Kubernetes' relaxed env-var names read
//! back with `sh -c env`. Debian's binary packages revert that upstream change, so the
//! upstream tarball is taken from Debian's source package (fetched with apt, signature and
//! hashes checked; [`verge_testkit::debian`]) and built without Debian's patches. Beside it, Debian's
//! `bash-static`: upstream's agnhost image has bash, which some specs run as `/bin/bash`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail, ensure};

use verge_testkit::debian;

/// The Debian release that packages busybox 1.37 (and a static bash).
const SUITE: &str = "trixie";
/// What `busybox` prints first for the wanted release.
const VERSION_PREFIX: &str = "BusyBox v1.37";
/// The cache directory of the build, under the conformance cache; a new name when the way
/// of building changes.
const DIR: &str = "busybox-1.37-upstream";

/// `<cache>/busybox-1.37-upstream/busybox`, built unless present and right.
///
/// # Errors
/// apt, the compiler, `make` or file writes fail, or the binary is not busybox 1.37 or
/// drops badly named variables.
pub fn ensure(cache_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache_dir.join(DIR);
    let binary = dir.join("busybox");
    if binary.is_file() && check(&binary).is_ok() {
        return Ok(binary);
    }
    verge_testkit::packages::ensure_debian_packages(&["gcc", "libc6-dev", "make", "bzip2"])?;
    eprintln!("conformance:   building busybox 1.37 from its upstream source (~3 min)");
    let archive = debian::Archive::new(SUITE, true)?;
    let files = archive.source("busybox")?;
    let tarball = debian::find(&files, |n| n.contains(".orig.tar"))
        .context("Debian's busybox source package has no .orig tarball")?;
    let work = tempfile::tempdir().context("creating a build directory")?;
    run(
        Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(work.path()),
        "tar",
    )?;
    let src = std::fs::read_dir(work.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .context("the busybox tarball holds no directory")?;
    run(
        Command::new("make").arg("defconfig").current_dir(&src),
        "make defconfig",
    )?;
    // Static, as upstream's image; `tc` does not build against current kernel headers.
    let config = std::fs::read_to_string(src.join(".config"))?
        .replace("# CONFIG_STATIC is not set", "CONFIG_STATIC=y")
        .replace("CONFIG_TC=y", "# CONFIG_TC is not set");
    std::fs::write(src.join(".config"), config)?;
    let jobs = std::thread::available_parallelism().map_or(2, usize::from);
    run(
        Command::new("nice")
            .args(["-n", "19", "make", &format!("-j{jobs}")])
            .current_dir(&src),
        "make",
    )?;
    check(&src.join("busybox"))?;
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(src.join("busybox"), &binary)?;
    Ok(binary)
}

/// `<cache>/bash-static/bash`: Debian's statically linked bash, fetched unless present.
///
/// # Errors
/// apt or `dpkg-deb` fail, or the package holds no `bash-static`.
pub fn ensure_bash(cache_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache_dir.join("bash-static");
    let binary = dir.join("bash");
    if binary.is_file() {
        return Ok(binary);
    }
    eprintln!("conformance:   fetching bash-static from Debian {SUITE}");
    let archive = debian::Archive::new(SUITE, false)?;
    let unpacked = archive.unpack("bash-static")?;
    let found = ["bin/bash-static", "usr/bin/bash-static"]
        .into_iter()
        .map(|p| unpacked.join(p))
        .find(|p| p.is_file())
        .context("Debian's bash-static package holds no bash-static binary")?;
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(&found, &binary)?;
    Ok(binary)
}

/// Checks that `binary` is busybox 1.37 and that its shell passes a badly named variable on.
fn check(binary: &Path) -> anyhow::Result<()> {
    let out = Command::new(binary)
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or_default();
    ensure!(
        first.starts_with(VERSION_PREFIX),
        "{} is {first:?}, not {VERSION_PREFIX}",
        binary.display()
    );
    let env = Command::new(binary)
        .args(["sh", "-c", "env"])
        .env("data-1", "value-1")
        .output()
        .with_context(|| format!("running {} sh", binary.display()))?;
    ensure!(
        String::from_utf8_lossy(&env.stdout).contains("data-1=value-1"),
        "{}'s shell drops the variable data-1",
        binary.display()
    );
    Ok(())
}

/// Runs `cmd` with its output captured, printing how long it has run every 30 s; fails
/// with its stderr's tail.
fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let (done, finished) = std::sync::mpsc::channel();
    let out = std::thread::scope(|scope| {
        let child = scope.spawn(move || {
            let out = cmd.stdin(Stdio::null()).output();
            let _ = done.send(());
            out
        });
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(std::time::Duration::from_secs(30))
        {
            eprintln!("conformance:     {what}: {} s", started.elapsed().as_secs());
        }
        child.join()
    });
    let out = out
        .map_err(|_| anyhow::anyhow!("{what} panicked"))?
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{what} failed ({}): {}", out.status, tail.join("\n"));
    }
    Ok(())
}
