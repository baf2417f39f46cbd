//! Container termination messages, as the kubelet gives them (`terminationMessagePath`,
//! `terminationMessagePolicy`).
//!
//! Before a container instance is created, edged makes an empty file for it on the host
//! (`<pod dir>/containers/<container>/<restart count>`, mode 0666 so a non-root user can
//! write it) and bind-mounts it at the container's `terminationMessagePath` (the API server
//! defaults it to `/dev/termination-log`). Once the instance exited, its terminated state's
//! `message` is what the file holds, at most [`MAX_FILE_BYTES`]; with the policy
//! `FallbackToLogsOnError`, an instance that exited non-zero with an empty file gets the tail
//! of its log instead (the last [`MAX_LOG_LINES`] lines, at most [`MAX_LOG_BYTES`]). The
//! file is opened without following symlinks: the container owns its content, never where it
//! points.

use std::io::Read as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

/// The most of the file read (the kubelet's 4 KiB).
pub const MAX_FILE_BYTES: u64 = 4096;
/// Log lines a fallback message holds at most (the kubelet's 80).
pub const MAX_LOG_LINES: usize = 80;
/// Bytes a fallback message holds at most (the kubelet's 2 KiB, the newest kept).
pub const MAX_LOG_BYTES: usize = 2048;

/// The host file of instance `restart_count` of container `name` in pod directory `pod_dir`.
pub fn host_path(pod_dir: &Path, name: &str, restart_count: u32) -> PathBuf {
    pod_dir
        .join("containers")
        .join(name)
        .join(restart_count.to_string())
}

/// The container path of `c`'s message, if it has one.
pub fn container_path(c: &Container) -> Option<&str> {
    c.termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// Whether `c` falls back to its log (`terminationMessagePolicy: FallbackToLogsOnError`).
pub fn falls_back_to_logs(c: &Container) -> bool {
    c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
}

/// Creates the empty, world-writable file at `path` (and its directories), replacing what
/// was there.
///
/// # Errors
/// The file cannot be created.
pub fn create(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A leftover (an interrupted earlier attempt) is replaced, never followed.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nofollow())
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o666))
}

fn nofollow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

/// What the file at `path` holds (at most [`MAX_FILE_BYTES`], lossy UTF-8); empty when it
/// is missing, is a symlink, or cannot be read.
pub fn read(path: &Path) -> String {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nofollow())
        .open(path);
    let mut bytes = Vec::new();
    if let Ok(file) = file {
        let _ = file.take(MAX_FILE_BYTES).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The fallback message from a log tail: its last [`MAX_LOG_LINES`] lines, cut to the
/// newest [`MAX_LOG_BYTES`].
pub fn from_log(log: &[u8]) -> String {
    let text = String::from_utf8_lossy(log);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let tail = lines[lines.len().saturating_sub(MAX_LOG_LINES)..].concat();
    if tail.len() <= MAX_LOG_BYTES {
        return tail;
    }
    let mut start = tail.len() - MAX_LOG_BYTES;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    tail[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_fresh_world_writable_and_read_within_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = host_path(dir.path(), "c", 2);
        assert!(path.ends_with("containers/c/2"));
        create(&path).expect("create");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o666);
        std::fs::write(&path, "x".repeat(5000)).expect("write");
        assert_eq!(read(&path).len(), 4096);
        create(&path).expect("create again");
        assert_eq!(read(&path), "");
    }

    #[test]
    fn a_symlink_is_neither_followed_nor_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "host secret").expect("write");
        let path = dir.path().join("msg");
        std::os::unix::fs::symlink(&secret, &path).expect("symlink");
        assert_eq!(read(&path), "");
        create(&path).expect("replaced");
        assert_eq!(
            std::fs::read_to_string(&secret).expect("read"),
            "host secret"
        );
    }

    #[test]
    fn a_log_fallback_keeps_the_newest_lines_and_bytes() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let message = from_log(log.as_bytes());
        assert!(message.starts_with("line 20\n") && message.ends_with("line 99\n"));
        let long = "y".repeat(3000);
        assert_eq!(from_log(long.as_bytes()).len(), MAX_LOG_BYTES);
        assert_eq!(from_log(b"DONE"), "DONE");
    }
}
