//! Atomic volume updates (the kubelet's `AtomicWriter`).
//!
//! Layout of a volume directory after a write:
//! ```text
//! ..2025_01_02_15_04_05.<random>/key   the files of this version, with their modes
//! ..data -> ..2025_01_02_15_04_05.<random>
//! key -> ..data/key                    one symlink per top-level name of the payload
//! ```
//! A write that changes nothing (same paths, contents and modes) does nothing. Otherwise a
//! new timestamped directory is filled, `..data_tmp` pointed at it and renamed over `..data`
//! (atomic), symlinks of removed names deleted and the old directory removed. With an
//! fsGroup, the volume is re-owned ([`ownership`](super::ownership), read-only) before the
//! new version is published, and a file of another group counts as a change.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use super::ownership;
use super::{Result, VolumeError};

/// One file of a payload: its bytes and mode (e.g. `0o644`). Its `Debug` shows the size,
/// not the content (secrets and tokens are never logged).
#[derive(Clone, PartialEq, Eq)]
pub(super) struct File {
    /// The content.
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("bytes", &self.data.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// Relative path (`key`, `dir/key`) -> file.
pub(super) type Payload = BTreeMap<String, File>;

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `payload` into the volume directory `dir` (created 0755 if missing), owned by
/// group `fs_group` if given (the payload's modes should include the group bits already:
/// [`ownership::file_mode`]); returns whether anything changed.
///
/// # Errors
/// [`VolumeError::Io`] for a file system failure or an invalid payload path (absolute, with
/// `..`, or starting with `..`); [`VolumeError::Blocking`] if the writer panicked.
pub(super) async fn write(dir: PathBuf, payload: Payload, fs_group: Option<u32>) -> Result<bool> {
    tokio::task::spawn_blocking(move || write_blocking(&dir, &payload, fs_group))
        .await
        .map_err(VolumeError::Blocking)?
}

fn invalid(path: &Path, what: &str) -> VolumeError {
    VolumeError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned()),
    }
}

/// Every file under `root`, as paths relative to it (empty when `root` is missing).
fn files_under(root: &Path, rel: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        let rel = rel.join(entry.file_name());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            files_under(root, &rel, out);
        } else {
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
}

fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

fn unchanged(
    old: &Path,
    old_files: &BTreeSet<String>,
    payload: &Payload,
    fs_group: Option<u32>,
) -> bool {
    old_files.len() == payload.len()
        && payload.iter().all(|(p, f)| {
            let path = old.join(p);
            let same_meta = std::fs::metadata(&path).is_ok_and(|m| {
                m.permissions().mode() & 0o7777 == f.mode & 0o7777
                    && fs_group.is_none_or(|g| m.gid() == g)
            });
            same_meta && std::fs::read(&path).is_ok_and(|d| d == f.data)
        })
}

/// Creates the file `path` (which must not exist: never through a symlink) with `f`'s content
/// and mode (set on the open file, past the umask).
fn write_new(path: &Path, f: &File) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nofollow_flag())
        .mode(0o600)
        .open(path)?;
    file.write_all(&f.data)?;
    file.set_permissions(std::fs::Permissions::from_mode(f.mode))
}

/// `O_NOFOLLOW` as an `open` flag.
fn nofollow_flag() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

fn write_blocking(dir: &Path, payload: &Payload, fs_group: Option<u32>) -> Result<bool> {
    for p in payload.keys() {
        let rel = Path::new(p);
        let bad = p.is_empty()
            || p.starts_with("..")
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
        if bad {
            return Err(invalid(&dir.join(p), "invalid path in volume payload"));
        }
    }
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(io(dir))?;
    }
    let data_link = dir.join(DATA);
    let old_name = std::fs::read_link(&data_link).ok();
    let mut old_files = BTreeSet::new();
    if let Some(old) = &old_name {
        files_under(&dir.join(old), Path::new(""), &mut old_files);
        if unchanged(&dir.join(old), &old_files, payload, fs_group) {
            return Ok(false);
        }
    }

    let stamp = chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S");
    let ts_name = format!("..{stamp}.{}", rand::random::<u32>());
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir(&ts_dir).map_err(io(&ts_dir))?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))
        .map_err(io(&ts_dir))?;
    for (p, f) in payload {
        let path = ts_dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        write_new(&path, f).map_err(io(&path))?;
    }
    if let Some(gid) = fs_group {
        ownership::set(dir, gid, true)?;
    }

    let new_top: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    for top in &new_top {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA).join(top), &link).map_err(io(&link))?;
        }
    }
    let tmp = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp);
    symlink(&ts_name, &tmp).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &data_link).map_err(io(&data_link))?;

    for old in &old_files {
        let top = top_level(old);
        if !new_top.contains(top) {
            let link = dir.join(top);
            std::fs::remove_file(&link).map_err(io(&link))?;
        }
    }
    if let Some(old) = old_name {
        let old_dir = dir.join(old);
        std::fs::remove_dir_all(&old_dir).map_err(io(&old_dir))?;
    }
    Ok(true)
}
