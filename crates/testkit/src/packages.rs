//! Debian packages the build and the tests need, installed with `apt-get` on demand.
//!
//! architecture.md §6: the Docker engine, the test image's busybox, the network tools of
//! the partition tests and the MQTT broker come from Debian packages, installed here (apt-get
//! as root, or through `sudo -n`). They are not all a Debian machine needs: README's "Set-up"
//! lists the rest (Rust, Go, Python's `venv` for the Python example controller, root).

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::lock::FileLock;
use crate::paths;

/// The packages [`ensure_packages`] installs: the Docker engine, the static busybox of
/// the test image, `ip`/`iptables` for network-partition tests, `nft` for edgecore's Service
/// proxy, and the MQTT broker of the eventbus tests ([`crate::mosquitto`]). (The build itself needs none: `protoc` comes from
/// the `protoc-bin-vendored` crate.)
pub const REQUIRED_PACKAGES: &[&str] = &[
    "docker.io",
    "busybox-static",
    "iproute2",
    "iptables",
    "nftables",
    "mosquitto",
];

/// Installs every missing package of [`REQUIRED_PACKAGES`].
///
/// # Errors
/// See [`ensure_debian_packages`].
pub fn ensure_packages() -> anyhow::Result<()> {
    ensure_debian_packages(REQUIRED_PACKAGES)
}

/// Whether the Debian package `name` is installed (`dpkg-query` reports
/// `install ok installed`). `false` as well when `dpkg-query` is missing.
pub fn is_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok installed"))
        .unwrap_or(false)
}

/// Installs the missing ones of `names` with
/// `apt-get install -y --no-install-recommends`, running `apt-get update` once and
/// retrying when the first attempt fails (a fresh machine has no package lists).
///
/// Serialized across processes by the lock file `~/.cache/verge/run/apt.lock`, so
/// concurrent test binaries do not fight over dpkg's lock. Output of apt-get goes to
/// this process's stderr. Runs apt-get through `sudo -n` when not root.
///
/// # Errors
/// `apt-get` missing (not a Debian-like system) or failing twice; a package still not
/// installed afterwards.
pub fn ensure_debian_packages(names: &[&str]) -> anyhow::Result<()> {
    if names.iter().all(|n| is_installed(n)) {
        return Ok(());
    }
    let _lock = FileLock::acquire(&paths::run_dir().join("apt.lock"))?;
    let missing: Vec<&str> = names.iter().copied().filter(|n| !is_installed(n)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "verge-testkit: installing Debian packages: {}",
        missing.join(" ")
    );
    if apt_get(&["install", "-y", "--no-install-recommends"], &missing).is_err() {
        apt_get(&["update"], &[])?;
        apt_get(&["install", "-y", "--no-install-recommends"], &missing)?;
    }
    let still: Vec<&str> = missing.into_iter().filter(|n| !is_installed(n)).collect();
    if !still.is_empty() {
        bail!(
            "packages still not installed after apt-get install: {}",
            still.join(" ")
        );
    }
    Ok(())
}

/// Whether this process runs as root (the owner of `/proc/self`).
pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Runs `apt-get <args> <packages>` (through `sudo -n` when not root), stdout to stderr.
fn apt_get(args: &[&str], packages: &[&str]) -> anyhow::Result<()> {
    let mut cmd = if is_root() {
        Command::new("apt-get")
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", "apt-get"]);
        c
    };
    cmd.args(args)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(std::process::Stdio::null())
        .stdout(std::io::stderr());
    let status = cmd
        .status()
        .with_context(|| format!("running apt-get {}", args.join(" ")))?;
    if !status.success() {
        bail!(
            "apt-get {} {} failed: {status}",
            args.join(" "),
            packages.join(" ")
        );
    }
    Ok(())
}
