//! Images on the node: the locally built pause image, and moving Docker images into
//! containerd's `k8s.io` namespace (where the CRI plugin, hence kubelet, looks).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// `docker save <docker_ref> | ctr -a <socket> -n k8s.io images import -`: the image becomes
/// `docker.io/<docker_ref>` (Docker's normalization) in containerd, which kubelet finds for
/// pods naming `<docker_ref>` with `imagePullPolicy: IfNotPresent` or `Never`.
///
/// # Errors
/// The image is not in Docker, or `docker save` / `ctr images import` fail (their stderr is
/// in the error).
pub(super) fn import(ctr: &Path, socket: &Path, docker_ref: &str) -> anyhow::Result<()> {
    if !docker::image_exists(docker_ref) {
        bail!("image {docker_ref} is not in the local Docker engine");
    }
    let mut save = Command::new("docker")
        .args(["save", docker_ref])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running docker save")?;
    let save_out = save.stdout.take().context("docker save stdout")?;
    let import = Command::new(ctr)
        .arg("-a")
        .arg(socket)
        .args(["-n", "k8s.io", "images", "import", "-"])
        .stdin(save_out)
        .output()
        .with_context(|| format!("running {} images import", ctr.display()))?;
    let saved = save.wait_with_output()?;
    if !saved.status.success() {
        bail!(
            "docker save {docker_ref} failed: {}",
            String::from_utf8_lossy(&saved.stderr).trim()
        );
    }
    if !import.status.success() {
        bail!(
            "ctr images import of {docker_ref} failed: {}{}",
            String::from_utf8_lossy(&import.stderr).trim(),
            String::from_utf8_lossy(&import.stdout).trim()
        );
    }
    Ok(())
}
