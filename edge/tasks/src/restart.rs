//! A restart of edgecore in place: a task that changed what edgecore runs with (its
//! configuration, its binary) asks for it; every module stops as on SIGTERM (pods keep
//! running: stopping edgecore never stops containers), and edgecore's `main` then replaces
//! the process with the same binary, or the one the task names ([`Restart::request_exec`]),
//! with the same arguments (`exec`), so a supervisor (systemd, a test kit) sees the same
//! process carry on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The request, shared by taskmanager (which asks), edgecore's modules (which stop) and
/// `main` (which restarts); cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Restart {
    requested: Arc<AtomicBool>,
    program: Arc<Mutex<Option<PathBuf>>>,
    token: CancellationToken,
}

impl Restart {
    /// Asks for the restart: marks it, and [`Restart::cancelled`] completes.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.token.cancel();
    }

    /// Asks for a restart into `program` (another edgecore binary: an upgrade's trial run or
    /// its roll-back) instead of the running one.
    pub fn request_exec(&self, program: PathBuf) {
        if let Ok(mut p) = self.program.lock() {
            *p = Some(program);
        }
        self.request();
    }

    /// The binary the restart runs: the one [`Restart::request_exec`] named, `None` for the
    /// running one.
    pub fn program(&self) -> Option<PathBuf> {
        self.program.lock().ok().and_then(|p| p.clone())
    }

    /// Completes once a restart was asked for (edgecore then stops its modules).
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// Whether a restart was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}
