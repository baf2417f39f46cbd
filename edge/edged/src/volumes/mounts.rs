//! tmpfs mounts of emptyDir `medium: Memory` volumes (the kubelet's `setupTmpfs`) and of
//! secret and projected volumes (the kubelet's memory-backed wrapper of them), and the
//! unmounting of everything under a pod directory before it is removed.
//!
//! Mount points are read from `/proc/self/mountinfo`, so a mount made before an edgecore
//! restart is found again. The mounts are made in edgecore's mount namespace: Docker must
//! share it (edgecore and dockerd on the host, as in practice) to see them in binds.

use std::ffi::{CString, OsString};
use std::io::{BufRead as _, BufReader};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};

use super::VolumeError;
use crate::quantity::parse_scaled;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// Where it is mounted (octal escapes decoded).
    point: PathBuf,
    /// The file system type, e.g. `tmpfs`.
    fs_type: String,
}

/// Decodes the octal escapes (`\040` for a space) of a mountinfo path.
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        if let Some(d) = octal {
            out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

/// The mount of one mountinfo line; `None` for a line that is not one.
fn parse_line(line: &str) -> Option<Mount> {
    let (pre, post) = line.split_once(" - ")?;
    let point = pre.split(' ').nth(4)?;
    let fs_type = post.split(' ').next()?;
    Some(Mount {
        point: unescape(point),
        fs_type: fs_type.to_owned(),
    })
}

/// The mounts of a mountinfo text, in its order (a later mount is on top of an earlier one).
#[cfg(test)]
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

/// The mounts of `/proc/self/mountinfo`, in its order, read a line at a time: the file grows
/// with every container's mounts, and reading it whole for each volume of a burst of pods
/// was most of edgecore's transient memory (heaptrack on `cargo xtask bench pod-startup`).
/// Unreadable, it has none.
fn mounts() -> impl Iterator<Item = Mount> {
    let file = std::fs::File::open(MOUNTINFO).ok();
    file.into_iter()
        .flat_map(|f| BufReader::new(f).lines().map_while(Result::ok))
        .filter_map(|line| parse_line(&line))
}

/// The tmpfs mount option of an emptyDir's `sizeLimit`: `size=<bytes>` for a positive limit,
/// `None` without one (the kernel default, half of RAM).
///
/// # Errors
/// [`VolumeError::SetUp`] of volume `volume` for a quantity edgecore cannot parse (e.g. the
/// exponent form `1e9`).
pub(super) fn size_option(
    volume: &str,
    size_limit: Option<&Quantity>,
) -> Result<Option<String>, VolumeError> {
    let Some(q) = size_limit else {
        return Ok(None);
    };
    match parse_scaled(&q.0, 0) {
        Some(0) => Ok(None),
        Some(bytes) => Ok(Some(format!("size={bytes}"))),
        None => Err(VolumeError::SetUp {
            volume: volume.to_owned(),
            reason: format!("sizeLimit {:?} is not a supported quantity", q.0),
        }),
    }
}

/// Whether `dir` (canonical) is a tmpfs mount point (its topmost mount).
fn is_tmpfs(dir: &Path) -> bool {
    mounts()
        .filter(|m| m.point == dir)
        .last()
        .is_some_and(|m| m.fs_type == "tmpfs")
}

/// Mounts a tmpfs on the existing directory `dir` with `option` (e.g. `size=16777216`),
/// unless `dir` already is a tmpfs mount point (e.g. mounted before an edgecore restart).
///
/// # Errors
/// The failure of `mount(2)` (`EPERM` when not root), or of resolving `dir`.
pub(crate) fn mount_tmpfs(dir: &Path, option: Option<&str>) -> std::io::Result<()> {
    let dir = std::fs::canonicalize(dir)?;
    if is_tmpfs(&dir) {
        return Ok(());
    }
    let data = option
        .map(CString::new)
        .transpose()
        .map_err(std::io::Error::other)?;
    rustix::mount::mount("tmpfs", &dir, "tmpfs", MountFlags::empty(), data.as_deref())?;
    Ok(())
}

/// Mode of the root of a secret or projected volume's tmpfs (the same as on disk).
const MEMORY_VOLUME_OPTION: &str = "mode=0755";

/// Puts the secret or projected volume `volume` at `dir` on a tmpfs, so its secrets and
/// tokens never reach the disk: creates `dir` (0755) and mounts a tmpfs on it with `mount`
/// unless it is one already (after an edgecore restart). A directory that already holds
/// files (written on disk by an edgecore before secrets had to be on tmpfs) is left as it
/// is: its running containers bind it, and a tmpfs over it would hide later updates from
/// them. When the mount fails, the volume fails ([`VolumeError::SetUp`], the kubelet's
/// `FailedMount` event) and the pod does not start, as with the kubelet: nothing is written.
///
/// # Errors
/// [`VolumeError::SetUp`] when the tmpfs cannot be mounted; [`VolumeError::Io`] when `dir`
/// cannot be created or read; [`VolumeError::Blocking`] if the work panicked.
pub(super) async fn memory_volume(
    volume: &str,
    dir: &Path,
    mount: super::MountMemory,
) -> Result<(), VolumeError> {
    let (volume, dir) = (volume.to_owned(), dir.to_owned());
    tokio::task::spawn_blocking(move || {
        let io = |source| VolumeError::Io {
            path: dir.clone(),
            source,
        };
        if std::fs::symlink_metadata(&dir).is_err() {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&dir)
                .map_err(io)?;
        }
        let canonical = std::fs::canonicalize(&dir).map_err(io)?;
        if is_tmpfs(&canonical) || std::fs::read_dir(&dir).map_err(io)?.next().is_some() {
            return Ok(());
        }
        mount(&dir, Some(MEMORY_VOLUME_OPTION)).map_err(|error| VolumeError::SetUp {
            volume: volume.clone(),
            reason: format!(
                "mount failed: cannot mount a tmpfs at {} for its secrets ({error}); they are never written to disk",
                dir.display()
            ),
        })
    })
    .await
    .map_err(VolumeError::Blocking)?
}

/// Whether `dir` (canonical) is a mount point.
pub(super) fn is_mount_point(dir: &Path) -> bool {
    mounts().any(|m| m.point == dir)
}

/// The first mount point at or under `dir` (canonical), if any is left.
pub(super) fn first_mount_under(dir: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(dir).ok()?;
    mounts().map(|m| m.point).find(|p| p.starts_with(&dir))
}

/// Unmounts every mount point under `dir` (and `dir` itself), topmost first, so the pod
/// directory can be removed without deleting through a mount (a busy mount is detached).
/// A missing `dir` has nothing to unmount.
///
/// # Errors
/// The first `umount(2)` failure (other than the mount being gone already), with its path.
pub(super) fn unmount_under(dir: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return Ok(());
    };
    let under: Vec<Mount> = mounts().filter(|m| m.point.starts_with(&dir)).collect();
    for m in under.into_iter().rev() {
        let result = match rustix::mount::unmount(&m.point, UnmountFlags::empty()) {
            Err(Errno::BUSY) => rustix::mount::unmount(&m.point, UnmountFlags::DETACH),
            other => other,
        };
        match result {
            // Not (or no longer) a mount point: a stale line or a stacked mount gone with it.
            Ok(()) | Err(Errno::INVAL | Errno::NOENT) => {}
            Err(e) => return Err((m.point, e.into())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_with_escapes_and_optional_fields() {
        let text = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
43 27 0:39 / /var/lib/pods/u/volumes/a\\040b rw,relatime shared:5 master:1 - tmpfs tmpfs rw,size=1024k
bad line
";
        assert_eq!(
            parse_mountinfo(text),
            [
                Mount {
                    point: "/proc".into(),
                    fs_type: "proc".into()
                },
                Mount {
                    point: "/var/lib/pods/u/volumes/a b".into(),
                    fs_type: "tmpfs".into()
                },
            ]
        );
        assert_eq!(unescape(r"a\134b\011\9"), Path::new("a\\b\t\\9"));
    }

    #[test]
    fn size_option_from_size_limit() {
        let q = |s: &str| Quantity(s.to_owned());
        assert_eq!(size_option("v", None).ok(), Some(None));
        assert_eq!(
            size_option("v", Some(&q("16Mi"))).ok(),
            Some(Some("size=16777216".into()))
        );
        assert_eq!(
            size_option("v", Some(&q("1G"))).ok(),
            Some(Some("size=1000000000".into()))
        );
        assert_eq!(
            size_option("v", Some(&q("0"))).ok(),
            Some(None),
            "zero: no limit"
        );
        assert!(size_option("v", Some(&q("1e9"))).is_err());
    }
}
