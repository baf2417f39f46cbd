//! The DMI unix socket: its directory is created if missing; a socket file left by an
//! edgecore that is gone (nothing accepts on it) is replaced, a live one is refused (another
//! edgecore serves it) and so is any other kind of file (never deleted). The socket is bound
//! under a temporary name, given its mode, then renamed into place, so it never exists at
//! its path with a wider mode.

use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};
use tracing::info;

use crate::error::Error;

/// Binds the DMI socket at `path` with permission bits `mode`.
///
/// # Errors
/// [`Error::Socket`]: the directory cannot be created, the path is a live socket or not a
/// socket, or binding fails.
pub async fn bind(path: &Path, mode: u32) -> Result<UnixListener, Error> {
    let failed = |source| Error::Socket {
        path: path.to_owned(),
        source,
    };
    let dir = path
        .parent()
        .ok_or_else(|| failed(io::Error::new(io::ErrorKind::InvalidInput, "no directory")))?;
    std::fs::create_dir_all(dir).map_err(failed)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).await.is_ok() {
                return Err(failed(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process serves this socket (another edgecore?)",
                )));
            }
            info!(path = %path.display(), "replacing stale DMI socket");
            std::fs::remove_file(path).map_err(failed)?;
        }
        Ok(_) => {
            return Err(failed(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    let temporary = temporary_path(path);
    let _ = std::fs::remove_file(&temporary);
    let listener = UnixListener::bind(&temporary).map_err(failed)?;
    let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(e));
    }
    Ok(listener)
}

/// Removes the socket file (on shutdown), if it is still a socket.
pub fn remove(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_and_live_ones_or_files_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/dmi.sock");
        let live = bind(&path, 0o600)
            .await
            .expect("bind creates the directory");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let err = bind(&path, 0o600).await.expect_err("in use");
        assert!(err.to_string().contains("dmi.sock"), "{err}");
        drop(live);
        let again = bind(&path, 0o660).await.expect("stale socket replaced");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        drop(again);
        remove(&path);
        std::fs::write(&path, b"not a socket").expect("file");
        assert!(bind(&path, 0o600).await.is_err());
        assert_eq!(std::fs::read(&path).expect("kept"), b"not a socket");
    }
}
