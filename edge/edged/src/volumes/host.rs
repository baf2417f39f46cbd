//! emptyDir and hostPath volumes (kubelet `emptydir` and `hostpath` plugins,
//! `hostPathTypeChecker`).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::Volume;
use tracing::warn;

use super::mounts;
use super::ownership::{self, FsGroup};
use super::{Result, VolumeError};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Sets up the emptyDir `volume` at `dir` (kubelet `emptyDir.SetUpAt`):
///
/// * the directory, mode 0777 (chmodded only when its permission bits differ, so the setgid
///   and sticky bits stay);
/// * `medium: Memory`: a tmpfs mounted on it, unless it already is one (after an edgecore
///   restart), with `size=` the `sizeLimit` in bytes; without a `sizeLimit` no size option,
///   so the kernel default (half of RAM) applies where the kubelet would use the pod's
///   memory limit or the node's allocatable memory. If the mount fails (edgecore not root)
///   the volume stays a plain directory on disk and a warning says so: the kubelet would
///   fail the pod, edged prefers to run it (edgecore runs as root in practice);
/// * with an fsGroup, ownership as in [`ownership`](super::ownership) (writable), skipped
///   under `fsGroupChangePolicy: OnRootMismatch` when the root is right already (the
///   kubelet's emptyDir plugin ignores the policy and always walks).
///
/// # Errors
/// [`VolumeError::SetUp`] for a `sizeLimit` that cannot be parsed; [`VolumeError::Io`] when the
/// directory cannot be made or re-owned; [`VolumeError::Blocking`] if the work panicked.
pub(super) async fn empty_dir(
    volume: &Volume,
    dir: &Path,
    fs_group: Option<FsGroup>,
) -> Result<()> {
    let src = volume.empty_dir.as_ref();
    let memory = src.and_then(|e| e.medium.as_deref()) == Some("Memory");
    let size = if memory {
        mounts::size_option(&volume.name, src.and_then(|e| e.size_limit.as_ref()))?
    } else {
        None
    };
    let (name, dir) = (volume.name.clone(), dir.to_owned());
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mode = std::fs::metadata(&dir)
            .map_err(io(&dir))?
            .permissions()
            .mode();
        if mode & 0o777 != 0o777 {
            let perms = std::fs::Permissions::from_mode(0o777);
            std::fs::set_permissions(&dir, perms).map_err(io(&dir))?;
        }
        if memory && let Err(error) = mounts::mount_tmpfs(&dir, size.as_deref()) {
            warn!(volume = %name, path = %dir.display(), %error,
                "cannot mount a tmpfs for emptyDir medium Memory; using a plain directory on disk");
        }
        if let Some(g) = fs_group
            && (!g.on_root_mismatch || ownership::root_needs_change(&dir, g.gid, false))
        {
            ownership::set(&dir, g.gid, false)?;
        }
        Ok(())
    })
    .await
    .map_err(VolumeError::Blocking)?
}

/// The kubelet's hostPath type check: `""` none; `DirectoryOrCreate` / `FileOrCreate`
/// create a missing path (directory 0755 with parents / empty file 0644), then must be a
/// directory / regular file, like `Directory` / `File`; `Socket`, `CharDevice`,
/// `BlockDevice` must be one.
///
/// # Errors
/// [`VolumeError::SetUp`] with the kubelet's message (`hostPath type check failed: <p> is not a
/// directory`, `... is not a file`, `... is not a socket file`, `... is not a character
/// device`, `... is not a block device`, `<t> is an invalid volume type`);
/// [`VolumeError::Io`] when creating fails.
pub(super) async fn check_host_path(volume: &Volume, path: &Path) -> Result<()> {
    let ty = volume
        .host_path
        .as_ref()
        .and_then(|h| h.type_.as_deref())
        .unwrap_or_default();
    let meta = tokio::fs::metadata(path).await.ok();
    let fail = |what: &str| {
        Err(VolumeError::SetUp {
            volume: volume.name.clone(),
            reason: format!(
                "hostPath type check failed: {} is not {what}",
                path.display()
            ),
        })
    };
    match ty {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => {
            tokio::fs::create_dir_all(path).await.map_err(io(path))?;
            let perms = std::fs::Permissions::from_mode(0o755);
            tokio::fs::set_permissions(path, perms)
                .await
                .map_err(io(path))
        }
        "FileOrCreate" if meta.is_none() => {
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .await
                .map_err(io(path))?;
            let perms = std::fs::Permissions::from_mode(0o644);
            tokio::fs::set_permissions(path, perms)
                .await
                .map_err(io(path))
        }
        "Directory" | "DirectoryOrCreate" if !meta.as_ref().is_some_and(|m| m.is_dir()) => {
            fail("a directory")
        }
        "File" | "FileOrCreate" if !meta.as_ref().is_some_and(|m| m.file_type().is_file()) => {
            fail("a file")
        }
        "Socket" if !meta.as_ref().is_some_and(|m| m.file_type().is_socket()) => {
            fail("a socket file")
        }
        "CharDevice"
            if !meta
                .as_ref()
                .is_some_and(|m| m.file_type().is_char_device()) =>
        {
            fail("a character device")
        }
        "BlockDevice"
            if !meta
                .as_ref()
                .is_some_and(|m| m.file_type().is_block_device()) =>
        {
            fail("a block device")
        }
        "Directory" | "DirectoryOrCreate" | "File" | "FileOrCreate" | "Socket" | "CharDevice"
        | "BlockDevice" => Ok(()),
        other => Err(VolumeError::SetUp {
            volume: volume.name.clone(),
            reason: format!("{other} is an invalid volume type"),
        }),
    }
}
