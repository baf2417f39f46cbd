//! The crate's error: which file was read and what was wrong with it.

use std::path::PathBuf;

/// The result of this crate's readers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A figure could not be read. Every variant names the file (or directory) concerned; a
/// malformed file gives [`Error::Malformed`] with the offending line, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file does not exist: the process or container is gone, or the controller is not
    /// mounted where expected.
    #[error("{}: no such file", path.display())]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// The file exists but could not be read (permissions, I/O error).
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file read.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the file is not in the format the kernel writes.
    #[error("{}: malformed line {line:?}: {reason}", path.display())]
    Malformed {
        /// The file read.
        path: PathBuf,
        /// The offending line (at most 120 characters of it).
        line: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// A required entry is absent from an otherwise well-formed file.
    #[error("{}: no {key:?} entry", path.display())]
    MissingKey {
        /// The file read.
        path: PathBuf,
        /// The entry looked for (e.g. `usage_usec`, `MemTotal`, or `cpuacct` for a
        /// `/proc/<pid>/cgroup` controller).
        key: &'static str,
    },
    /// The cgroup mount matches neither cgroup v2 (`cgroup.controllers` at its root) nor a
    /// v1 layout with `cpuacct` (or `cpu,cpuacct`) and `memory` hierarchies.
    #[error("unknown cgroup layout under {}: {reason}", root.display())]
    UnknownLayout {
        /// The cgroup mount examined.
        root: PathBuf,
        /// What was missing.
        reason: &'static str,
    },
    /// A cgroup path that is not absolute-and-downward (it has `..` in it).
    #[error("cgroup path {path:?} leaves its hierarchy")]
    InvalidCgroupPath {
        /// The path given.
        path: String,
    },
    /// `statvfs(2)` on a filesystem failed.
    #[error("statvfs {}: {source}", path.display())]
    Statvfs {
        /// The path whose filesystem was asked about.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}
