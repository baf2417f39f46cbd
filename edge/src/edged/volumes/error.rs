//! [`VolumeError`]: what setting up, refreshing, mounting and removing volumes can fail with.
//! The messages of mount failures are the kubelet's (they become `FailedMount` events and
//! `CreateContainerConfigError` waiting messages).

use std::path::PathBuf;

/// A volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume cannot be set up (kubelet event `FailedMount`); `reason` is the kubelet's,
    /// e.g. `configmap "cfg" not found` or `hostPath type check failed: /p is not a
    /// directory`.
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    SetUp {
        /// The pod's volume name.
        volume: String,
        /// What is wrong, as the kubelet says it.
        reason: String,
    },
    /// A file operation under the pods directory (or a hostPath) failed.
    #[error("volume I/O failed on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// File system work on the blocking pool panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
    /// A volumeMount names a volume the pod does not have (kubelet
    /// `CreateContainerConfigError`).
    #[error("cannot find volume \"{volume}\" to mount into container \"{container}\"")]
    UnknownVolume {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
    },
    /// A volumeMount has both `subPath` and `subPathExpr`.
    #[error(
        "volumeMount \"{volume}\" of container \"{container}\": subPathExpr and subPath are \
         mutually exclusive"
    )]
    SubPathAndExpr {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
    },
    /// A `subPath` that is absolute or contains `..` (kubelet validation).
    #[error("subPath {0:?} must be a relative path without '..'")]
    SubPath(String),
    /// A `subPathExpr` references variables that are undefined or empty (the kubelet fails
    /// the container then).
    #[error("missing value for {}", .0.join(", "))]
    SubPathExprMissing(Vec<String>),
    /// The source of configmaps, secrets and tokens failed (e.g. a cloud query timed out).
    #[error(transparent)]
    Objects(Box<crate::Error>),
}

impl From<crate::Error> for VolumeError {
    fn from(e: crate::Error) -> Self {
        Self::Objects(Box::new(e))
    }
}
