//! Exclusive advisory file locks (`flock(2)` via `std::fs::File::lock`).
//!
//! Locks are per open file description, so they serialize threads of one process as
//! well as separate processes (test binaries run by one `cargo test`).

use std::fs::{File, OpenOptions};
use std::path::Path;

use anyhow::Context as _;

/// An exclusive lock on a file, released on drop.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

impl FileLock {
    /// Blocks until the exclusive lock on `path` (created if missing, with its parent
    /// directories) is held.
    pub(crate) fn acquire(path: &Path) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening lock file {}", path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", path.display()))?;
        Ok(Self { _file: file })
    }

    /// [`FileLock::acquire`] on a blocking thread, for async callers.
    pub(crate) async fn acquire_async(path: &Path) -> anyhow::Result<Self> {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || Self::acquire(&path)).await?
    }
}
