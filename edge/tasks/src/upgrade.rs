//! NodeUpgradeJob on the node: edgecore replaced by the build in the job's image, pods never
//! stopped (stopping edgecore never stops containers), and rolled back by itself when the new
//! edgecore does not come up connected.
//!
//! The steps (KubeEdge's actions):
//!
//! 1. `Check`: the job's checks.
//! 2. `WaitingConfirmation`, with `requireConfirmation`: the node waits until its
//!    administrator confirms ([`verge_core::task::CONFIRM_ANNOTATION`] on the job, see
//!    docs/fleet.md); the wait does not count against the task's timeout.
//! 3. `BackUp`: the image is pulled by digest (`<repository>@<imageDigestGatter.<arch>>`, so
//!    the engine verifies the content; a job without a digest for the node's architecture is
//!    refused), with the node's registry logins (`<dataDir>/config.json`, as the kubelet's
//!    `<root-dir>/config.json`); [`BINARY_IN_IMAGE`] is read out of it into
//!    `<installed>.new` (mode 0755) beside the installed binary; the new binary must answer
//!    `--version` with `edgecore …` within [`SANITY_TIMEOUT`]. The installed binary stays as
//!    it is: it is the backup.
//! 4. `Upgrade`: edgecore stops its modules and `exec`s `<installed>.new` on trial. Once the
//!    new edgecore is connected to cloudhub (within the task's timeout) it renames itself over
//!    the installed binary (atomically; the old one is kept as `<installed>.previous`) and
//!    reports success with the session's downtime.
//! 5. `RollBack`, when it is not connected in time (it `exec`s the installed binary again),
//!    or when it does not start at all: the node's supervisor (the shipped unit's
//!    `Restart=always`) starts the installed binary, which finds the trial unconfirmed. Either
//!    way `<installed>.new` is removed and the failure reported.
//!
//! No shell, no command line made from the job: the image reference is rebuilt from its
//! parsed parts by fleetcontroller, and the only process started is the new binary itself
//! with the fixed argument `--version`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where edgecore's binary is in an upgrade image.
pub const BINARY_IN_IMAGE: &str = "/usr/local/bin/edgecore";

/// The largest binary read out of an image, in bytes.
pub const MAX_BINARY_BYTES: u64 = 512 * 1024 * 1024;

/// How long the new binary has to answer `--version`.
pub const SANITY_TIMEOUT: Duration = Duration::from_secs(10);

/// The version of the running edgecore, `v<semver>`.
pub const RUNNING_VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

/// The node's architecture as images name it (`amd64`, `arm64`), `None` for another.
pub fn arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Some("amd64"),
        "aarch64" => Some("arm64"),
        _ => None,
    }
}

/// `image` (`<repository>:<tag>`) pinned to `digest`: `<repository>@<digest>`.
pub fn pinned(image: &str, digest: &str) -> String {
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    let repository = match image[last_slash..].rfind(':') {
        Some(i) => &image[..last_slash + i],
        None => image,
    };
    let repository = repository.split('@').next().unwrap_or(repository);
    format!("{repository}@{digest}")
}

/// The paths of an upgrade of the binary at `running`: the installed binary (`running`, or
/// what a trial binary `<installed>.new` will be renamed to) and the staged one.
pub fn paths(running: &Path) -> (PathBuf, PathBuf) {
    let installed = match running.to_str().and_then(|p| p.strip_suffix(".new")) {
        Some(installed) => PathBuf::from(installed),
        None => running.to_owned(),
    };
    let staged = with_suffix(&installed, ".new");
    (installed, staged)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes `bytes` as the staged binary (mode 0755, whole).
///
/// # Errors
/// The file cannot be written.
pub fn stage(staged: &Path, bytes: &[u8]) -> Result<(), String> {
    crate::pending::write_atomically(staged, bytes, Some(0o755))
        .map_err(|e| format!("writing {}: {e}", staged.display()))
}

/// Runs `<binary> --version`: its first line, which must start with `edgecore `.
///
/// # Errors
/// It does not start, fails, says something else or takes longer than [`SANITY_TIMEOUT`].
pub async fn sanity_check(binary: &Path) -> Result<String, String> {
    let run = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SANITY_TIMEOUT, run)
        .await
        .map_err(|_| format!("the new binary did not answer --version within {SANITY_TIMEOUT:?}"))?
        .map_err(|e| format!("the new binary does not run: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next().unwrap_or_default().trim().to_owned();
    if !output.status.success() {
        return Err(format!(
            "the new binary's --version failed ({})",
            output.status
        ));
    }
    if !line.starts_with("edgecore ") {
        return Err(format!(
            "the new binary is not edgecore (--version: {line:?})"
        ));
    }
    Ok(line)
}

/// Installs the confirmed trial binary: the installed one is kept as `<installed>.previous`
/// (a hard link), then `staged` is renamed over it (atomic: the supervisor always finds a
/// whole binary).
///
/// # Errors
/// A link or rename failed (the installed binary is then unchanged).
pub fn install(installed: &Path, staged: &Path) -> Result<(), String> {
    let previous = with_suffix(installed, ".previous");
    match std::fs::remove_file(&previous) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("removing {}: {e}", previous.display()));
        }
        _ => {}
    }
    std::fs::hard_link(installed, &previous)
        .map_err(|e| format!("keeping {}: {e}", previous.display()))?;
    std::fs::rename(staged, installed)
        .map_err(|e| format!("installing {}: {e}", installed.display()))
}

/// Removes the staged binary (a roll-back; a missing one is fine).
pub fn discard(staged: &Path) {
    match std::fs::remove_file(staged) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %staged.display(), error = %e, "staged binary not removed");
        }
        _ => {}
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_pinned_by_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for (image, want) in [
            (
                "127.0.0.1:5000/verge/edgecore:v1.2.3",
                "127.0.0.1:5000/verge/edgecore",
            ),
            (
                "kubeedge/installation-package:v1.23.0",
                "kubeedge/installation-package",
            ),
            ("registry:5000/edgecore", "registry:5000/edgecore"),
        ] {
            assert_eq!(pinned(image, &digest), format!("{want}@{digest}"));
        }
    }

    #[test]
    fn a_trial_binary_knows_the_installed_path() {
        let installed = PathBuf::from("/usr/local/bin/edgecore");
        let staged = PathBuf::from("/usr/local/bin/edgecore.new");
        assert_eq!(paths(&installed), (installed.clone(), staged.clone()));
        assert_eq!(paths(&staged), (installed, staged));
    }

    #[test]
    fn install_keeps_the_previous_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let installed = dir.path().join("edgecore");
        std::fs::write(&installed, b"old").expect("written");
        let (_, staged) = paths(&installed);
        stage(&staged, b"new").expect("staged");
        install(&installed, &staged).expect("installed");
        assert_eq!(std::fs::read(&installed).expect("read"), b"new");
        assert_eq!(
            std::fs::read(dir.path().join("edgecore.previous")).expect("read"),
            b"old"
        );
        assert!(!staged.exists());
        discard(&staged);
    }

    #[tokio::test]
    async fn the_sanity_check_wants_edgecore() {
        let not_edgecore = sanity_check(Path::new("/bin/true")).await;
        assert!(not_edgecore.is_err(), "{not_edgecore:?}");
        let missing = sanity_check(Path::new("/nonexistent/edgecore")).await;
        assert!(missing.is_err_and(|e| e.contains("does not run")));
    }
}
