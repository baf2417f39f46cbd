//! A filesystem's capacity and use, from `statvfs(2)`, as cAdvisor reports the kubelet's
//! node `fs` and `runtime.imageFs`.

use std::path::Path;

use crate::error::{Error, Result};

/// A filesystem's space in bytes and its inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Bytes available to unprivileged users (`f_bavail` blocks).
    pub available_bytes: u64,
    /// Size of the filesystem (`f_blocks` blocks).
    pub capacity_bytes: u64,
    /// Bytes in use: capacity less free blocks (`f_blocks − f_bfree`), so the root-reserved
    /// blocks are neither used nor available, as cAdvisor counts them.
    pub used_bytes: u64,
    /// Free inodes (`f_ffree`).
    pub inodes_free: u64,
    /// Total inodes (`f_files`).
    pub inodes: u64,
    /// Inodes in use (`f_files − f_ffree`).
    pub inodes_used: u64,
}

/// The figures of the filesystem holding `path`, block counts × the fragment size
/// (`f_frsize`, or `f_bsize` where that is 0). [`Error::Statvfs`] when the call fails (no
/// such path, permissions).
pub fn filesystem(path: &Path) -> Result<FsStats> {
    let st = rustix::fs::statvfs(path).map_err(|errno| Error::Statvfs {
        path: path.to_owned(),
        source: errno.into(),
    })?;
    let block = if st.f_frsize > 0 {
        st.f_frsize
    } else {
        st.f_bsize
    };
    Ok(FsStats {
        available_bytes: st.f_bavail.saturating_mul(block),
        capacity_bytes: st.f_blocks.saturating_mul(block),
        used_bytes: st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(block),
        inodes_free: st.f_ffree,
        inodes: st.f_files,
        inodes_used: st.f_files.saturating_sub(st.f_ffree),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tempdir_filesystem_is_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let fs = filesystem(dir.path()).unwrap();
        assert!(fs.capacity_bytes > 0);
        assert!(fs.used_bytes <= fs.capacity_bytes);
        assert!(fs.available_bytes <= fs.capacity_bytes);
        assert_eq!(fs.inodes_used, fs.inodes - fs.inodes_free);
        let err = filesystem(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(err, Error::Statvfs { .. }), "{err}");
    }
}
