//! A restart of edgecore in place: a task that changed what edgecore runs with (its
//! configuration) asks for it; every module stops as on SIGTERM (pods keep running: stopping
//! edgecore never stops containers), and edgecore's `main` then replaces the process with the
//! same binary and arguments (`exec`), so a supervisor (systemd, a test kit) sees the same
//! process carry on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// The request, shared by taskmanager (which asks), edgecore's modules (which stop) and
/// `main` (which restarts); cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Restart {
    requested: Arc<AtomicBool>,
    token: CancellationToken,
}

impl Restart {
    /// Asks for the restart: marks it, and [`Restart::cancelled`] completes.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.token.cancel();
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
