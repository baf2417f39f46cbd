//! Images on the node: the locally built pause image, and moving Docker images into
//! containerd's `k8s.io` namespace (where the CRI plugin, hence kubelet, looks).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::PAUSE_IMAGE;
use crate::lock::FileLock;
use crate::{docker, packages, paths};

/// `crates/testkit/assets/pause/pause.c`.
fn pause_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/pause/pause.c")
}

/// Makes sure the local Docker engine has [`PAUSE_IMAGE`]: a root filesystem holding only
/// `/pause` (`assets/pause/pause.c` compiled with Debian's `gcc -static`), imported with
/// `ENTRYPOINT ["/pause"]` and user 65535. Installs `gcc` and `libc6-dev` if missing.
/// Serialized across processes by `~/.cache/verge/run/pause-image.lock`.
///
/// # Errors
/// Package installation, the compiler, or `docker import` fail.
pub(super) fn ensure_pause_image() -> anyhow::Result<()> {
    if docker::image_exists(PAUSE_IMAGE) {
        return Ok(());
    }
    let _lock = FileLock::acquire(&paths::run_dir().join("pause-image.lock"))?;
    if docker::image_exists(PAUSE_IMAGE) {
        return Ok(());
    }
    eprintln!("verge-testkit: building the pause image {PAUSE_IMAGE}");
    packages::ensure_debian_packages(&["gcc", "libc6-dev"])?;
    let root = tempfile::tempdir().context("creating the pause rootfs")?;
    let binary = root.path().join("pause");
    let out = Command::new("gcc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(&binary)
        .arg(pause_source())
        .output()
        .context("running gcc")?;
    if !out.status.success() {
        bail!(
            "gcc -static {} failed: {}",
            pause_source().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    docker::import_rootfs(
        root.path(),
        PAUSE_IMAGE,
        &[r#"ENTRYPOINT ["/pause"]"#, "USER 65535:65535"],
    )
}

/// `docker save -o <archive> <docker_ref>`, then `ctr -a <socket> -n k8s.io images import
/// <archive>`: the image becomes `docker.io/<docker_ref>` (Docker's normalization) in
/// containerd, which kubelet finds for pods naming `<docker_ref>` with `imagePullPolicy:
/// IfNotPresent` or `Never`. The archive goes through a temporary file rather than a pipe so
/// that a failing step reports its own error (through a pipe, an import that stops early shows
/// up only as `docker save` dying of SIGPIPE). The import is tried [`IMPORT_ATTEMPTS`] times,
/// 2 s apart (it replaces the image, so a retry is harmless).
///
/// # Errors
/// The image is not in Docker, or `docker save` / `ctr images import` fail (their stderr is
/// in the error).
pub(super) fn import(ctr: &Path, socket: &Path, docker_ref: &str) -> anyhow::Result<()> {
    if !docker::image_exists(docker_ref) {
        bail!("image {docker_ref} is not in the local Docker engine");
    }
    let dir = tempfile::tempdir().context("creating a directory for the image archive")?;
    let archive = dir.path().join("image.tar");
    let archive_arg = archive.to_str().context("the archive path is not UTF-8")?;
    docker::docker(&["save", "-o", archive_arg, docker_ref])?;
    let mut attempt = 1;
    loop {
        let out = Command::new(ctr)
            .arg("-a")
            .arg(socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&archive)
            .output()
            .with_context(|| format!("running {} images import", ctr.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let error = format!(
            "ctr images import of {docker_ref} failed ({}): {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
        if attempt == IMPORT_ATTEMPTS {
            bail!("{error} (attempt {attempt} of {IMPORT_ATTEMPTS})");
        }
        eprintln!("verge-testkit: {error}; retrying");
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// How many times [`import`] runs `ctr images import` before it gives up.
const IMPORT_ATTEMPTS: u32 = 3;
