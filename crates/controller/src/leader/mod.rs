//! Leader election between a controller's replicas on a `coordination.k8s.io/v1` Lease,
//! following client-go's `leaderelection` (as kube-controller-manager uses it): only the
//! leader attaches to cloudhub and acts; a standby only polls the Lease.
//!
//! - A standby tries to take the Lease every `retryPeriod` (jittered up to 2.2 ×): it may
//!   when nobody holds it, or when the holder's record has not changed for
//!   `leaseDuration` as this replica observed it (its monotonic clock, not `renewTime`).
//!   Every write is a `replace` guarded by the `resourceVersion` last read, so the API
//!   server lets exactly one of several contenders win.
//! - The leader renews every `retryPeriod`. When no renewal succeeded for `renewDeadline`,
//!   or a read shows another holder (the Lease was taken by force), it stops acting at once
//!   and [`Elector::run`] fails with [`Error::Lost`] (client-go's `OnStoppedLeading`: the
//!   process exits and Kubernetes restarts it as a standby).
//! - On shutdown the leader stops its work, waits for it to drain (still renewing), then
//!   releases the Lease (client-go's `ReleaseOnCancel`: no holder, one second), so a standby
//!   takes over at its next attempt instead of after `leaseDuration`.
//! - A replica restarted with the same identity (the same pod) takes its own unexpired term
//!   back at once.
//!
//! Every transition is a `tracing` event and is published on a [`Leadership`] handle.
//!
//! # Layout
//! - [`config`]: the YAML `leaderElection:` section ([`LeaderElectionConfig`]).
//! - `lock`: reads and guarded writes of the Lease (acquire, renew, release).
//! - `record`: the Lease record and client-go's pure decisions over it.
//! - [`elector`]: the election loop ([`Elector`]).
//! - `elected`: [`Elected`], a controller service's configuration, client and leadership
//!   before it runs (both controllers' `new`, `leadership` and `run`).

pub mod config;
mod elected;
pub mod elector;
mod lock;
mod record;

pub use config::LeaderElectionConfig;
pub use elected::Elected;
pub use elector::{Elector, run_as_leader};

use tokio::sync::watch;

/// A replica's view of the election.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Whether this replica leads (acts) now. Always `true` while a controller without
    /// leader election runs.
    pub leading: bool,
    /// The holder last seen in the Lease (this replica's identity while it leads); `None`
    /// when nobody holds it or it was not read yet.
    pub holder: Option<String>,
}

/// Read side of a replica's leadership (for health and metrics): cheap to clone.
#[derive(Debug, Clone)]
pub struct Leadership(watch::Receiver<Status>);

/// Write side of a replica's leadership, given to its [`Elector`].
#[derive(Debug)]
pub struct StatusSender(watch::Sender<Status>);

/// A new leadership channel, starting as a standby that has seen no holder.
pub fn channel() -> (StatusSender, Leadership) {
    let (tx, rx) = watch::channel(Status::default());
    (StatusSender(tx), Leadership(rx))
}

impl Leadership {
    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.0.borrow().leading
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.0.borrow().clone()
    }

    /// A receiver notified of every change.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.0.clone()
    }
}

impl StatusSender {
    /// Publishes `status` if it differs from the current one; returns whether it did.
    fn set(&self, status: Status) -> bool {
        self.0.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        })
    }

    fn current(&self) -> Status {
        self.0.borrow().clone()
    }
}

/// What can go wrong in leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `leaderElection` configuration breaks a rule (named).
    #[error("invalid leaderElection configuration: {0}")]
    Config(&'static str),
    /// This replica stopped leading while it acted: the Lease was not renewed within
    /// `renewDeadline`, or another replica holds it. The controller's work was stopped; the
    /// process should exit (Kubernetes restarts it as a standby).
    #[error("lost the leader lease {namespace}/{lease} held as {identity:?}: {reason}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        lease: String,
        /// This replica's identity.
        identity: String,
        /// Why: the renew deadline passed, or who holds the Lease now.
        reason: String,
    },
    /// The controller's work panicked or was aborted.
    #[error("the leader's work ended abnormally")]
    Work(#[source] tokio::task::JoinError),
}
