//! Pod volume figures for the Summary's `volume[]` (the kubelet's volume metrics providers):
//! each directory under `<pods dir>/<pod uid>/volumes/` (every volume edged makes there:
//! emptyDir, configMap, secret, projected, downwardAPI; hostPath volumes live elsewhere and,
//! as on the kubelet, report nothing) with its filesystem's capacity and free space
//! (`statvfs(2)`) and the bytes and inodes the volume itself uses, counted as `du` counts
//! them (allocated blocks, no symbolic link followed, one filesystem). Like the kubelet,
//! which refreshes volume usage in the background every minute, a count is kept for
//! [`REFRESH`] and at most [`MAX_ENTRIES`] entries are walked per volume, so a volume with a
//! huge tree costs a bounded walk.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fs::{FsStats, filesystem};

/// How long a volume's usage count is kept.
pub const REFRESH: Duration = Duration::from_secs(60);
/// Entries walked per volume at most.
pub const MAX_ENTRIES: usize = 100_000;

/// Usage counts of volumes, kept for [`REFRESH`].
#[derive(Debug, Default)]
pub struct VolumeUsage {
    counted: HashMap<PathBuf, (Instant, Usage)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    bytes: u64,
    inodes: u64,
}

impl VolumeUsage {
    /// The volumes of pod `uid` under `pods_dir`, by name, sorted: their filesystem's
    /// figures with `usedBytes` and `inodesUsed` the volume's own. A volume that cannot be
    /// read is left out; no volume directory, no volumes.
    pub fn pod_volumes(
        &mut self,
        pods_dir: &Path,
        uid: &str,
        now: Instant,
    ) -> Vec<(String, FsStats)> {
        let dir = pods_dir.join(uid).join("volumes");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut volumes: Vec<(String, FsStats)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let path = e.path();
                let mut fs = filesystem(&path).ok()?;
                let usage = self.usage(&path, now);
                fs.used_bytes = usage.bytes;
                fs.inodes_used = usage.inodes;
                Some((name, fs))
            })
            .collect();
        volumes.sort_by(|a, b| a.0.cmp(&b.0));
        volumes
    }

    /// Forgets the counts of volumes not under `pods_dir/<uid>` for any of `uids`.
    pub fn retain(&mut self, pods_dir: &Path, uids: &[&str]) {
        self.counted
            .retain(|path, _| uids.iter().any(|uid| path.starts_with(pods_dir.join(uid))));
    }

    fn usage(&mut self, path: &Path, now: Instant) -> Usage {
        if let Some((at, usage)) = self.counted.get(path)
            && now.saturating_duration_since(*at) < REFRESH
        {
            return *usage;
        }
        let usage = walk(path);
        self.counted.insert(path.to_owned(), (now, usage));
        usage
    }
}

/// Allocated bytes (`st_blocks` × 512) and inodes of the tree at `root`, the root included;
/// symbolic links are counted, never followed; other filesystems are not entered.
fn walk(root: &Path) -> Usage {
    let Ok(top) = std::fs::symlink_metadata(root) else {
        return Usage::default();
    };
    let device = top.dev();
    let mut usage = Usage {
        bytes: top.blocks().saturating_mul(512),
        inodes: 1,
    };
    let mut pending = vec![root.to_owned()];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > MAX_ENTRIES {
                return usage;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            usage.bytes = usage
                .bytes
                .saturating_add(meta.blocks().saturating_mul(512));
            usage.inodes += 1;
            if meta.is_dir() && meta.dev() == device {
                pending.push(entry.path());
            }
        }
    }
    usage
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_counts_its_own_files_and_never_follows_links() {
        let pods = tempfile::tempdir().unwrap();
        let volume = pods.path().join("u-1/volumes/data");
        std::fs::create_dir_all(volume.join("sub")).unwrap();
        std::fs::write(volume.join("sub/file"), vec![7u8; 64 * 1024]).unwrap();
        // A link to a big tree outside must not be walked.
        std::os::unix::fs::symlink("/usr", volume.join("escape")).unwrap();
        std::fs::create_dir_all(pods.path().join("u-1/volumes/empty")).unwrap();
        let mut usage = VolumeUsage::default();
        let now = Instant::now();
        let volumes = usage.pod_volumes(pods.path(), "u-1", now);
        let names: Vec<&str> = volumes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["data", "empty"]);
        let data = volumes[0].1;
        assert!(data.used_bytes >= 64 * 1024, "{data:?}");
        assert!(
            data.used_bytes < 1024 * 1024,
            "the link was followed: {data:?}"
        );
        assert_eq!(data.inodes_used, 4, "{data:?}");
        assert!(data.capacity_bytes > 0);
        // Kept for a minute: a new file shows only after REFRESH.
        std::fs::write(volume.join("more"), vec![1u8; 256 * 1024]).unwrap();
        let again = usage.pod_volumes(pods.path(), "u-1", now + Duration::from_secs(1));
        assert_eq!(again[0].1.used_bytes, data.used_bytes);
        let later = usage.pod_volumes(pods.path(), "u-1", now + REFRESH);
        assert!(later[0].1.used_bytes >= data.used_bytes + 256 * 1024);
        usage.retain(pods.path(), &[]);
        assert!(usage.counted.is_empty());
        assert!(usage.pod_volumes(pods.path(), "absent", now).is_empty());
    }
}
