//! TCP connections from inside a pod's network namespace (what a CRI runtime's
//! `PortForward` does): a short-lived thread joins the namespace of the pod sandbox's process
//! (`/proc/<pid>/ns/net`, `setns`), connects to `127.0.0.1:<port>` and exits; the connected
//! socket keeps its namespace and is handed to tokio.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// How long a connect inside the pod may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection into a pod failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/proc/<pid>/ns/net` cannot be opened (the sandbox process is gone, or no permission).
    #[error("failed to open the network namespace of process {pid}")]
    OpenNamespace {
        /// The sandbox process.
        pid: u32,
        /// The open error.
        #[source]
        source: std::io::Error,
    },
    /// `setns` failed (needs CAP_SYS_ADMIN).
    #[error("failed to enter the network namespace of process {pid}")]
    EnterNamespace {
        /// The sandbox process.
        pid: u32,
        /// The errno.
        #[source]
        source: rustix::io::Errno,
    },
    /// The connect failed (e.g. nothing listens on the port).
    #[error("failed to connect to localhost:{port} inside namespace of process {pid}")]
    Connect {
        /// The port.
        port: u16,
        /// The sandbox process.
        pid: u32,
        /// The connect error.
        #[source]
        source: std::io::Error,
    },
    /// The connecting thread could not be started or died.
    #[error("the namespace thread failed")]
    Thread(#[source] std::io::Error),
}

/// Connects to `127.0.0.1:port` in the network namespace of process `pid`.
///
/// # Errors
/// See [`Error`].
pub async fn connect(pid: u32, port: u16) -> Result<TcpStream, Error> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("netns-connect".into())
        .spawn(move || {
            let _ = tx.send(connect_in_namespace(pid, port));
        })
        .map_err(Error::Thread)?;
    let stream = rx.await.map_err(|_| {
        Error::Thread(std::io::Error::other(
            "the namespace thread ended without a result",
        ))
    })??;
    let connect = |source| Error::Connect { port, pid, source };
    stream.set_nonblocking(true).map_err(connect)?;
    TcpStream::from_std(stream).map_err(connect)
}

/// Runs on a thread of its own, which it leaves in the pod's namespace; the thread ends
/// right after.
fn connect_in_namespace(pid: u32, port: u16) -> Result<std::net::TcpStream, Error> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|source| Error::OpenNamespace { pid, source })?;
    move_into_link_name_space(namespace.as_fd(), Some(LinkNameSpaceType::Network))
        .map_err(|source| Error::EnterNamespace { pid, source })?;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    std::net::TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)
        .map_err(|source| Error::Connect { port, pid, source })
}
