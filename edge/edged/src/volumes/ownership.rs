//! fsGroup ownership of volumes (the kubelet's `volume.SetVolumeOwnership`).
//!
//! With a pod `securityContext.fsGroup`, every file and directory of an emptyDir,
//! configMap, secret, downwardAPI or projected volume (not hostPath) gets that group
//! (`lchown`), and its mode gains `rw` for user and group (`r` in the read-only volume
//! types), directories also `x` and the setgid bit, so files made later inherit the group.
//! Symlinks are re-owned but not chmodded (that would change their target).

use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::{Result, VolumeError};

/// Bits added to a file of a writable volume (emptyDir).
const RW_MASK: u32 = 0o660;
/// Bits added to a file of a read-only volume (configMap, secret, downwardAPI, projected).
const RO_MASK: u32 = 0o440;
/// Bits added to a directory, besides the file bits.
const DIR_MASK: u32 = 0o2110;

/// A pod's `securityContext.fsGroup` and `fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FsGroup {
    /// The group to own the volumes.
    pub gid: u32,
    /// `fsGroupChangePolicy: OnRootMismatch` (default `Always`): an emptyDir whose root has
    /// the group, the setgid bit and the group bits already is not walked again.
    pub on_root_mismatch: bool,
}

impl FsGroup {
    /// The pod's fsGroup, if it has one.
    pub(super) fn of(pod: &Pod) -> Option<Self> {
        let sc = pod.spec.as_ref()?.security_context.as_ref()?;
        Some(Self {
            gid: sc.fs_group.and_then(|g| u32::try_from(g).ok())?,
            on_root_mismatch: sc.fs_group_change_policy.as_deref() == Some("OnRootMismatch"),
        })
    }
}

fn mask(read_only: bool) -> u32 {
    if read_only { RO_MASK } else { RW_MASK }
}

/// The mode a file of mode `mode` has once owned by an fsGroup: a configMap's
/// `defaultMode: 0400` becomes `0440` (the mode sets the user bits, the group can read).
pub(super) fn file_mode(mode: u32, read_only: bool) -> u32 {
    mode | mask(read_only)
}

/// The kubelet's `requiresPermissionChange`: false when the volume root `dir` already has
/// group `gid`, the setgid bit and the group's permission bits.
pub(super) fn root_needs_change(dir: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return true;
    };
    let want = mask(read_only) | DIR_MASK;
    !(meta.is_dir() && meta.gid() == gid && meta.mode() & want == want)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Gives everything under `dir` (and `dir`) group `gid` and the group's permission bits
/// (see the module docs); `read_only` for the configMap/secret/downwardAPI/projected types.
/// Symlinks are not followed. Blocking.
///
/// # Errors
/// [`VolumeError::Io`] for the first file that cannot be read, re-owned or chmodded.
pub(super) fn set(dir: &Path, gid: u32, read_only: bool) -> Result<()> {
    let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if meta.gid() != gid {
            lchown(&path, None, Some(gid)).map_err(io(&path))?;
        }
        let ty = meta.file_type();
        if ty.is_symlink() {
            continue;
        }
        let mut add = mask(read_only);
        if ty.is_dir() {
            add |= DIR_MASK;
            for entry in std::fs::read_dir(&path).map_err(io(&path))? {
                stack.push(entry.map_err(io(&path))?.path());
            }
        }
        // Chown clears set-id bits of executables: chmod from the mode read before it.
        let mode = meta.mode() & 0o7777;
        if mode | add != mode || meta.gid() != gid {
            let perms = std::fs::Permissions::from_mode(mode | add);
            std::fs::set_permissions(&path, perms).map_err(io(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_policy() {
        assert_eq!(file_mode(0o400, true), 0o440);
        assert_eq!(file_mode(0o644, true), 0o644);
        assert_eq!(file_mode(0o600, false), 0o660);
        let pod: Pod = serde_json::from_value(serde_json::json!({"spec": {"containers": [],
            "securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"}}}))
        .expect("pod");
        let want = FsGroup {
            gid: 2000,
            on_root_mismatch: true,
        };
        assert_eq!(FsGroup::of(&pod), Some(want));
        assert_eq!(FsGroup::of(&Pod::default()), None);
    }

    #[test]
    fn walk_sets_group_setgid_and_group_bits() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = d.path().join("v");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(root.join("sub/f"), "x").expect("write");
        std::fs::set_permissions(root.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::os::unix::fs::symlink("sub/f", root.join("link")).expect("symlink");
        // Our own primary group: lchown to it works unprivileged too.
        let gid = std::fs::metadata(d.path()).expect("meta").gid();
        set(&root, gid, false).expect("set");
        let mode = |p: &Path| std::fs::symlink_metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(mode(&root), 0o2775);
        assert_eq!(mode(&root.join("sub")), 0o2775);
        assert_eq!(mode(&root.join("sub/f")), 0o660);
        assert!(!root_needs_change(&root, gid, false));
        assert!(root_needs_change(&root, gid.wrapping_add(1), false));
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o775)).expect("chmod");
        assert!(root_needs_change(&root, gid, false), "setgid bit missing");
    }
}
