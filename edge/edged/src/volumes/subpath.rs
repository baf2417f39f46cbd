//! Pinning an opened subPath for Docker (the kubelet's `doBindSubPath`) and removing the
//! pins with the pod (`doCleanSubPaths`).
//!
//! Docker resolves a bind source path itself, later; a container of the pod could swap a
//! checked component for a symlink in between. So the target opened by
//! [`safe_open`](super::safe_open) is bind-mounted from its descriptor
//! (`/proc/self/fd/<fd>`) onto a mount point of edgecore's own,
//! `<pod dir>/volume-subpaths/<volume>/<container>/<index>` (`index`: the mount's position
//! in the container's `volumeMounts`), a directory or an empty file like the target, and
//! that mount point is Docker's bind source. A container start replaces an earlier pin of
//! the same mount point (the container's previous instance has exited). The pins are
//! unmounted and removed before the pod directory is, one mount point at a time and never
//! recursively, so a pin that cannot be unmounted stops the removal instead of deleting
//! through it into a volume or a hostPath.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::io::Errno;
use rustix::mount::UnmountFlags;

use super::VolumeError;
use super::error::SubPathError;
use super::safe_open::Opened;

/// The directory of the pins under a pod directory.
pub(super) const SUBPATHS_DIR: &str = "volume-subpaths";

/// How many mounts stacked on one mount point are undone at most.
const MAX_STACKED: usize = 16;

/// `<pod_dir>/volume-subpaths/<volume>/<container>/<index>`.
pub(super) fn mount_point(pod_dir: &Path, volume: &str, container: &str, index: usize) -> PathBuf {
    pod_dir
        .join(SUBPATHS_DIR)
        .join(volume)
        .join(container)
        .join(index.to_string())
}

/// Unmounts everything mounted on `path` (busy: detached); not a mount point is fine.
fn unmount_all(path: &Path) -> std::io::Result<()> {
    for _ in 0..MAX_STACKED {
        let result = match rustix::mount::unmount(path, UnmountFlags::NOFOLLOW) {
            Err(Errno::BUSY) => rustix::mount::unmount(path, UnmountFlags::DETACH),
            other => other,
        };
        match result {
            Ok(()) => {}
            Err(Errno::INVAL | Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Unmounts and removes the mount point `path` (a directory must then be empty).
fn clear(path: &Path) -> std::io::Result<()> {
    unmount_all(path)?;
    let result = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Bind-mounts `opened` onto `target` (created, replacing an earlier pin); blocking.
///
/// # Errors
/// [`SubPathError::Bind`] when the mount point cannot be made or the bind fails (`EPERM`
/// when not root: subPath mounts are refused then rather than passed unpinned).
pub(super) fn pin(opened: &Opened, target: &Path) -> Result<(), SubPathError> {
    let bind = |source: std::io::Error| SubPathError::Bind {
        target: target.to_owned(),
        source,
    };
    if let Some(parent) = target.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)
            .map_err(bind)?;
    }
    clear(target).map_err(bind)?;
    if opened.is_dir {
        std::fs::DirBuilder::new()
            .mode(0o750)
            .create(target)
            .map_err(bind)?;
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(target)
            .map_err(bind)?;
    }
    let source = format!("/proc/self/fd/{}", opened.fd.as_raw_fd());
    rustix::mount::mount_bind(source.as_str(), target).map_err(|e| bind(e.into()))
}

/// Unmounts and removes every pin under `pod_dir` (see the module docs); a missing
/// directory is fine. Blocking.
///
/// # Errors
/// [`VolumeError::Io`] for the first mount point or directory that cannot be unmounted or
/// removed; the caller must then leave the pod directory in place.
pub(super) fn remove_pins(pod_dir: &Path) -> Result<(), VolumeError> {
    let base = pod_dir.join(SUBPATHS_DIR);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| VolumeError::Io { path, source }
    };
    let entries = |dir: &Path| -> Result<Vec<PathBuf>, VolumeError> {
        match std::fs::read_dir(dir) {
            Ok(rd) => rd.map(|e| e.map(|e| e.path()).map_err(io(dir))).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io(dir)(e)),
        }
    };
    for volume in entries(&base)? {
        for container in entries(&volume)? {
            for point in entries(&container)? {
                clear(&point).map_err(io(&point))?;
            }
            clear(&container).map_err(io(&container))?;
        }
        clear(&volume).map_err(io(&volume))?;
    }
    clear(&base).map_err(io(&base))
}
