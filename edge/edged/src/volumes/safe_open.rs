//! Opening a subPath inside its volume without ever leaving the volume (the kubelet's
//! `doSafeOpen` and `doSafeMakeDir`, its fix of CVE-2017-1002101).
//!
//! The walk holds a descriptor of the volume root and opens one component at a time with
//! `openat(O_PATH | O_NOFOLLOW)` relative to the descriptor of the previous one. The kernel
//! therefore never resolves more than one name and never follows a symlink; a component that
//! a container swaps for a symlink after it was checked is opened as the symlink itself and
//! checked again. What the walk finds:
//!
//! * a directory: entered (its descriptor pushed on the walk's stack);
//! * a symlink: followed by the walk itself while it stays inside the volume, as the kubelet
//!   allows (configMap, secret and projected volumes are made of `key -> ..data/key` links, and
//!   mounting one key with `subPath: key` is common). A relative target is spliced in front of
//!   the remaining components; its `..` pops the walk's own stack of descriptors (never the
//!   kernel's `..`), so popping above the volume root is seen. An absolute target (even one
//!   that names a path inside the volume on the host) or one climbing above the root is
//!   refused ([`SubPathError::Escapes`]), as are more than 40 links ([`SubPathError::Loop`]);
//! * a missing name (when creating): made with `mkdirat` in the parent descriptor with the
//!   volume root's mode (chmodded past the umask), then opened with `O_NOFOLLOW |
//!   O_DIRECTORY`, as the kubelet creates a missing subPath;
//! * anything else (a regular file, a socket, ...): the target if it is the last component
//!   (the kubelet binds a file subPath as a file), else [`SubPathError::NotADirectory`].
//!
//! The volume root itself is opened following symlinks: it is edgecore's own directory, or
//! the hostPath the pod names (which may be a symlink on the host, as for the kubelet).
//! The descriptors stay valid inside the volume: a container cannot rename a directory
//! across its mount (`EXDEV`). Missing directories are created inside the volume before a
//! later refusal may be found (e.g. `new/../../x` reached through a link); nothing outside
//! the volume is ever created or changed.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::SubPathError;

/// At most this many symlinks are followed in one walk (Linux's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// The target of a walk.
#[derive(Debug)]
pub(super) struct Opened {
    /// A descriptor of the target (`O_PATH`, or `O_RDONLY` for a directory the walk made).
    pub fd: OwnedFd,
    /// Whether it is a directory (else it is bound as a file).
    pub is_dir: bool,
}

/// A directory the walk has entered: its descriptor and its name (for messages).
struct Entered {
    fd: OwnedFd,
    name: OsString,
}

/// The walk's state: the volume root, the entered directories below it, what is left.
struct Walk {
    root: OwnedFd,
    stack: Vec<Entered>,
    todo: VecDeque<OsString>,
    /// The logical path of the last symlink followed (named when a later `..` escapes).
    last_link: Option<PathBuf>,
    links: u32,
    /// The mode of directories the walk creates (the volume root's).
    mode: Mode,
}

fn io_err(path: PathBuf) -> impl FnOnce(Errno) -> SubPathError {
    move |e| SubPathError::Io {
        path,
        source: e.into(),
    }
}

/// Splits a path into its names, dropping empty ones and `.` (kept: `..`).
fn names(bytes: &[u8]) -> impl Iterator<Item = OsString> + '_ {
    bytes
        .split(|b| *b == b'/')
        .filter(|n| !n.is_empty() && *n != b".")
        .map(|n| OsString::from_vec(n.to_vec()))
}

impl Walk {
    /// The path (relative to the volume root) of the entered directories plus `name`.
    fn logical(&self, name: &OsStr) -> PathBuf {
        let mut p: PathBuf = self.stack.iter().map(|e| e.name.as_os_str()).collect();
        p.push(name);
        p
    }

    fn parent(&self) -> &OwnedFd {
        self.stack.last().map_or(&self.root, |e| &e.fd)
    }

    /// Makes the missing directory `name` in the current directory; returns it opened.
    fn make_dir(&self, name: &OsStr) -> Result<OwnedFd, SubPathError> {
        let path = self.logical(name);
        match rustix::fs::mkdirat(self.parent(), name, self.mode) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err(path)(e)),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(self.parent(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Replaced by a symlink (or a file) since: the refusal comes from the next look.
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(SubPathError::NotADirectory(path)),
            Err(e) => return Err(io_err(path)(e)),
        };
        rustix::fs::fchmod(&fd, self.mode).map_err(io_err(path))?;
        Ok(fd)
    }

    /// Follows the symlink `fd` (at `path`): its target's names go in front of the rest.
    fn follow(&mut self, fd: &OwnedFd, path: PathBuf) -> Result<(), SubPathError> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(SubPathError::Loop(path));
        }
        let target = rustix::fs::readlinkat(fd, "", Vec::new()).map_err(io_err(path.clone()))?;
        let target = target.as_bytes();
        if target.first() == Some(&b'/') {
            return Err(SubPathError::Escapes(path));
        }
        for name in names(target).collect::<Vec<_>>().into_iter().rev() {
            self.todo.push_front(name);
        }
        self.last_link = Some(path);
        Ok(())
    }

    fn run(mut self, create: bool) -> Result<Opened, SubPathError> {
        while let Some(name) = self.todo.pop_front() {
            if name == ".." {
                if self.stack.pop().is_none() {
                    let link = self.last_link.clone().unwrap_or_else(|| name.into());
                    return Err(SubPathError::Escapes(link));
                }
                continue;
            }
            let path = self.logical(&name);
            let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = match rustix::fs::openat(self.parent(), &name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    let fd = self.make_dir(&name)?;
                    self.stack.push(Entered { fd, name });
                    continue;
                }
                Err(e) => return Err(io_err(path)(e)),
            };
            let stat = rustix::fs::fstat(&fd).map_err(io_err(path.clone()))?;
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Symlink => self.follow(&fd, path)?,
                FileType::Directory => self.stack.push(Entered { fd, name }),
                _ if self.todo.is_empty() => return Ok(Opened { fd, is_dir: false }),
                _ => return Err(SubPathError::NotADirectory(path)),
            }
        }
        let fd = match self.stack.pop() {
            Some(e) => e.fd,
            None => self.root,
        };
        Ok(Opened { fd, is_dir: true })
    }
}

/// Opens `sub` (a relative path, already checked to have no `..`) inside the volume
/// directory `root` as the module docs describe; with `create`, missing components are made
/// as directories.
///
/// # Errors
/// [`SubPathError::Escapes`] for a symlink leading out of the volume, [`SubPathError::Loop`],
/// [`SubPathError::NotADirectory`], [`SubPathError::Io`] for a failing call (e.g. `ENOENT`
/// for a missing component without `create`, or a missing volume root).
pub(super) fn open_in(root: &Path, sub: &Path, create: bool) -> Result<Opened, SubPathError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root = rustix::fs::openat(CWD, root, flags, Mode::empty()).map_err(io_err(".".into()))?;
    let stat = rustix::fs::fstat(&root).map_err(io_err(".".into()))?;
    let walk = Walk {
        root,
        stack: Vec::new(),
        todo: names(sub.as_os_str().as_bytes()).collect(),
        last_link: None,
        links: 0,
        mode: Mode::from_raw_mode(stat.st_mode & 0o7777),
    };
    walk.run(create)
}
