//! The Docker engine and the local test image.
//!
//! architecture.md §6: Docker is Debian's `docker.io`; the test image is made locally with
//! `docker import` of a root filesystem holding Debian's `busybox-static`, because no
//! registry can be reached from tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::lock::FileLock;
use crate::{daemon, packages, paths};

/// The test image: busybox (every applet symlinked in `/bin`), `PATH=/bin`, default
/// command `/bin/sh`, a root user in `/etc/passwd`. About 2 MB.
pub const TEST_IMAGE: &str = "verge-test/busybox:latest";

/// How long [`ensure_docker`] waits for a freshly started `dockerd`.
pub const DOCKERD_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Directory of the `dockerd` log when this kit starts the daemon:
/// `~/.cache/verge/run/docker` (file `dockerd.log`).
pub fn docker_run_dir() -> PathBuf {
    paths::run_dir().join("docker")
}

/// Whether `docker info` succeeds (client present and daemon reachable).
pub fn docker_ready() -> bool {
    Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Makes sure a Docker daemon answers.
///
/// When `docker info` fails: installs Debian's `docker.io` if `dockerd` is missing,
/// starts `dockerd` detached (log `~/.cache/verge/run/docker/dockerd.log`; it keeps
/// running after this process exits) and waits up to [`DOCKERD_START_TIMEOUT`].
/// Serialized across processes by `~/.cache/verge/run/docker.lock`.
///
/// # Errors
/// Installation fails, or the daemon does not answer in time (the error holds the
/// tail of its log).
pub fn ensure_docker() -> anyhow::Result<()> {
    if docker_ready() {
        return Ok(());
    }
    let _lock = FileLock::acquire(&paths::run_dir().join("docker.lock"))?;
    if docker_ready() {
        return Ok(());
    }
    if which("dockerd").is_none() || which("docker").is_none() {
        packages::ensure_debian_packages(&["docker.io"])?;
    }
    let dockerd =
        which("dockerd").context("dockerd not found on PATH after installing docker.io")?;
    let dir = docker_run_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = dir.join("dockerd.log");
    eprintln!("verge-testkit: starting dockerd (log {})", log.display());
    let pid = daemon::spawn_detached(&dockerd, &[], &[], &log)?;
    std::fs::write(dir.join("dockerd.pid"), format!("{pid}\n"))?;
    let deadline = Instant::now() + DOCKERD_START_TIMEOUT;
    while !docker_ready() {
        if !daemon::is_alive(pid, None) {
            bail!(
                "dockerd exited during start-up; log tail:\n{}",
                crate::process::log_tail(&log, 30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "dockerd not ready after {DOCKERD_START_TIMEOUT:?}; log tail:\n{}",
                crate::process::log_tail(&log, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Whether the local Docker has image `reference` (`docker image inspect`).
pub fn image_exists(reference: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", reference])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The label edged puts on every container it creates; its value is the node name, so
/// several edgecores can share one engine.
pub const MANAGED_LABEL: &str = "io.verge.managed";

/// Force-removes every container, running or not, that edged created for a node whose name
/// `node` accepts (label [`MANAGED_LABEL`]), then those nodes' pod networks (Docker networks
/// with the same label). Returns how many containers were removed. Used when a test, the
/// quickstart or a benchmark is torn down: stopping edgecore alone leaves its pods running,
/// on purpose (offline autonomy), and a pod network left behind would keep its pod CIDR from
/// the next node given it.
///
/// # Errors
/// `docker ps` or `docker rm` cannot be run or fail.
pub fn remove_managed_containers(node: impl Fn(&str) -> bool) -> anyhow::Result<usize> {
    let removed = remove_labelled(&["ps", "-a"], &["rm", "-f"], &node)?;
    // The Service rules of each pod network (edgecore's nftables table `ip verge-<bridge>`)
    // go with it: they stay when edgecore stops, and a stale table would keep capturing this
    // host's own connections to cluster IPs (its `nat-output` chain).
    let bridges = managed_bridges(&node);
    // Best effort: a network still used by a container another process just made stays.
    let _ = remove_labelled(&["network", "ls"], &["network", "rm"], &node);
    for bridge in bridges {
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", &format!("verge-{bridge}")])
            .output();
    }
    Ok(removed)
}

/// The bridge devices of the managed networks whose node `node` accepts.
fn managed_bridges(node: &impl Fn(&str) -> bool) -> Vec<String> {
    let filter = format!("label={MANAGED_LABEL}");
    let format = format!(
        "{{{{index .Labels \"{MANAGED_LABEL}\"}}}} {{{{index .Options \"com.docker.network.bridge.name\"}}}}"
    );
    let Ok(ids) = docker(&["network", "ls", "-q", "--filter", &filter]) else {
        return Vec::new();
    };
    ids.lines()
        .filter(|id| !id.is_empty())
        .filter_map(|id| docker(&["network", "inspect", "-f", &format, id]).ok())
        .filter_map(|line| {
            let (n, bridge) = line.trim().split_once(' ')?;
            (node(n) && !bridge.is_empty()).then(|| bridge.to_owned())
        })
        .collect()
}

/// `docker <list> --filter label=MANAGED_LABEL` and `docker <remove>` of the objects whose
/// label value `node` accepts; how many were removed.
fn remove_labelled(
    list: &[&str],
    remove: &[&str],
    node: &impl Fn(&str) -> bool,
) -> anyhow::Result<usize> {
    let filter = format!("label={MANAGED_LABEL}");
    let format = format!("{{{{.ID}}}} {{{{.Label \"{MANAGED_LABEL}\"}}}}");
    let listed = docker(&[list, &["--filter", &filter, "--format", &format]].concat())?;
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, n)| node(n))
        .map(|(id, _)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    docker(&[remove, ids.as_slice()].concat())?;
    Ok(ids.len())
}

/// `docker <args>` and its stdout (trimmed).
///
/// # Errors
/// docker cannot be run or exits non-zero (the error holds its stderr).
pub fn docker(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .with_context(|| format!("running docker {args:?}"))?;
    if !out.status.success() {
        bail!(
            "docker {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The command of the pod sandbox container when [`TEST_IMAGE`] is the sandbox image (edged
/// `podSandboxImage`, because no registry can be reached): busybox has no pause binary.
pub const TEST_SANDBOX_COMMAND: [&str; 2] = ["sleep", "2147483647"];

/// The repository prefix of the images `cargo xtask images` builds (`verge/<binary>:<tag>`).
pub const VERGE_IMAGES: &str = "verge/";

/// Held while `cargo xtask images` writes the [`VERGE_IMAGES`] images into Docker, and by
/// [`crate::KubeletNode::import_image`] while it reads one of them: an import waits for a build in
/// progress (e.g. `cargo xtask test`'s, which runs beside the tests) rather than importing
/// a stale or missing image. Lock file `~/.cache/verge/run/images.lock`; released on drop.
#[derive(Debug)]
pub struct ImagesLock {
    _lock: FileLock,
}

impl ImagesLock {
    /// Blocks until the lock is held. Not reentrant: a thread holding it must drop it before
    /// importing.
    ///
    /// # Errors
    /// The lock file cannot be created or locked.
    pub fn acquire() -> anyhow::Result<Self> {
        Ok(Self {
            _lock: FileLock::acquire(&paths::run_dir().join("images.lock"))?,
        })
    }
}

/// Makes sure [`TEST_IMAGE`] exists, importing it when missing (installs
/// `busybox-static` first if needed). Requires a running daemon ([`ensure_docker`]).
/// Serialized across processes by `~/.cache/verge/run/image.lock`.
///
/// # Errors
/// Package installation, `busybox --list`, `tar` or `docker import` fail.
pub fn ensure_test_image() -> anyhow::Result<()> {
    if image_exists(TEST_IMAGE) {
        return Ok(());
    }
    let _lock = FileLock::acquire(&paths::run_dir().join("image.lock"))?;
    if image_exists(TEST_IMAGE) {
        return Ok(());
    }
    eprintln!("verge-testkit: importing {TEST_IMAGE}");
    import_busybox_image(TEST_IMAGE)
}

/// Imports a busybox image as described at [`TEST_IMAGE`] under `reference`
/// (replacing an existing one), installing `busybox-static` first if needed.
///
/// # Errors
/// Package installation, `busybox --list`, `tar` or `docker import` fail.
pub fn import_busybox_image(reference: &str) -> anyhow::Result<()> {
    let root = tempfile::tempdir().context("creating rootfs tempdir")?;
    busybox_rootfs(root.path())?;
    import_rootfs(
        root.path(),
        reference,
        &["ENV PATH=/bin", r#"CMD ["/bin/sh"]"#],
    )
}

/// Fills the directory `root` with the busybox root filesystem described at [`TEST_IMAGE`]
/// (`/bin/busybox` with every applet linked beside it, `/etc/passwd` and `/etc/group`
/// naming root, empty `/tmp`, `/proc`, `/sys`, `/dev`, `/root`), installing Debian's
/// `busybox-static` first if needed; a base for other images made with [`import_rootfs`].
///
/// # Errors
/// Package installation, file writes or `busybox --list` fail.
pub fn busybox_rootfs(root: &Path) -> anyhow::Result<()> {
    if !packages::is_installed("busybox-static") {
        packages::ensure_debian_packages(&["busybox-static"])?;
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .context("busybox not found in /bin or /usr/bin after installing busybox-static")?;
    busybox_rootfs_from(busybox, root)
}

/// Fills `root` with the busybox root filesystem described at [`TEST_IMAGE`] around the
/// static binary `busybox` (another build than Debian's, e.g. a newer release).
///
/// # Errors
/// File writes or `busybox --list` fail.
pub fn busybox_rootfs_from(busybox: &Path, root: &Path) -> anyhow::Result<()> {
    for dir in ["bin", "etc", "tmp", "proc", "sys", "dev", "root"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    std::fs::copy(busybox, root.join("bin/busybox"))
        .with_context(|| format!("copying {}", busybox.display()))?;
    let list = Command::new(busybox)
        .arg("--list")
        .output()
        .context("running busybox --list")?;
    if !list.status.success() {
        bail!("busybox --list failed: {}", list.status);
    }
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim) {
        if applet.is_empty() || applet == "busybox" || applet.contains('/') {
            continue;
        }
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
            .with_context(|| format!("linking applet {applet}"))?;
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n")?;
    Ok(())
}

/// `tar -C root -c . | docker import -c <change>... - reference`: an image of the root
/// filesystem `root` with the Dockerfile instructions `changes` (e.g. `ENTRYPOINT [...]`,
/// `USER 65535:65535`), without any base image or registry.
///
/// # Errors
/// `tar` or `docker import` fail.
pub fn import_rootfs(root: &Path, reference: &str, changes: &[&str]) -> anyhow::Result<()> {
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(root)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("running tar")?;
    let tar_out = tar.stdout.take().context("tar stdout")?;
    let import = Command::new("docker")
        .arg("import")
        .args(changes.iter().flat_map(|c| ["-c", c]))
        .args(["-", reference])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .context("running docker import")?;
    let tar_status = tar.wait()?;
    if !tar_status.success() || !import.success() {
        bail!("importing {reference} failed: tar {tar_status}, docker import {import}");
    }
    Ok(())
}

/// The first `name` on `PATH`, if any.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
