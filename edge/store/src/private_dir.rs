//! Directories no other user of the host may enter: edgecore's data directory, its pods
//! directory and every pod directory (the kubelet keeps its root and pod directories
//! private too). They hold the redb store (objects including Secrets), the volumes and the
//! service-account tokens.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use tracing::{info, warn};

/// The mode of a private directory.
pub const MODE: u32 = 0o700;

/// Creates `dir` (and missing parents) with mode 0700, or fixes an existing one: mode 0700,
/// and owned by edgecore's effective user and group (root in practice) when it is not.
/// A change of an existing directory is logged. Blocking.
///
/// # Errors
/// The directory cannot be created, read or chmodded. A failing chown (edgecore not root,
/// the directory someone else's) is only logged: the mode still shuts other users out.
pub fn ensure(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(MODE)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    if meta.uid() != uid || meta.gid() != gid {
        match std::os::unix::fs::chown(dir, Some(uid), Some(gid)) {
            Ok(()) => info!(path = %dir.display(), uid, gid, old_uid = meta.uid(),
                old_gid = meta.gid(), "private directory re-owned"),
            Err(error) => warn!(path = %dir.display(), %error, owner = meta.uid(),
                "cannot take ownership of a private directory"),
        }
    }
    let mode = meta.mode() & 0o7777;
    if mode != MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(MODE))?;
        info!(path = %dir.display(), old_mode = format!("{mode:o}"), "private directory made 0700");
    }
    Ok(())
}

/// Creates the file `path` with mode 0600 if it is missing (no window with a wider mode) and
/// makes an existing one 0600: a database file that holds Secrets or tokens (the store, the
/// edge API's cache). Its directory must exist. Blocking.
///
/// # Errors
/// The file cannot be created, opened or chmodded.
pub fn ensure_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}

/// Writes `bytes` to `path` at once: a `.<name>.tmp` file of mode 0600 beside it, synced,
/// then renamed over it, so a reader (or edgecore after a crash) sees the old content or the
/// new, never a part. Its directory is made private first ([`ensure`]). For files that hold
/// tokens, credentials or checkpoints in pod directories. Blocking.
///
/// # Errors
/// The directory or the file cannot be made, written or renamed.
pub fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{} names no file in a directory",
            path.display()
        )));
    };
    ensure(dir)?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_and_fixes_modes() {
        let d = tempfile::tempdir().expect("tempdir");
        let new = d.path().join("a/b");
        ensure(&new).expect("create");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(mode(&new), 0o700);
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure(&new).expect("fix");
        assert_eq!(mode(&new), 0o700);
        let uid = std::fs::metadata(&new).expect("meta").uid();
        assert_eq!(uid, rustix::process::geteuid().as_raw());
    }
}
