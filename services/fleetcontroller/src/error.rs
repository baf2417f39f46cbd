//! The error type of `verge-fleetcontroller`.

/// Everything that can go wrong in fleetcontroller. A reconcile error is logged and the
/// object retried after 10 s; only [`Error::Hub`] ends the process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An invalid `leaderElection`, or the Lease lost while leading (`verge-controller`).
    #[error(transparent)]
    Hub(#[from] verge_controller::Error),
    /// A Kubernetes API call failed.
    #[error("API server: {action} failed")]
    Kube {
        /// What was attempted, e.g. `"patch node labels"`.
        action: &'static str,
        /// The kube-rs error (an `ApiError` carries the server's status and reason).
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the NodeGroup finalizer failed, or the work it guards did.
    #[error("nodegroup finalizer")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The controller is shutting down.
    #[error("shutting down")]
    Shutdown,
}

impl Error {
    /// The error and its chain of causes, joined by `": "`.
    pub fn reason(&self) -> String {
        verge_controller::error::reason(self)
    }

    /// Wraps a kube-rs error with the action that failed.
    pub(crate) fn kube(action: &'static str) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kube { action, source }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
