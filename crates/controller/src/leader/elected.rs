//! [`Elected`]: what a controller service is before it runs — its configuration, its API
//! client and the two ends of its leadership channel — shared by edgecontroller and
//! devicecontroller, which differ only in what the leader does.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::{Leadership, StatusSender, channel, run_as_leader};

/// A controller replica that acts only while it holds its Lease: built with
/// [`Elected::new`], observed through [`Elected::leadership`], run with [`Elected::run`].
pub struct Elected {
    config: crate::Config,
    client: kube::Client,
    status: StatusSender,
    leadership: Leadership,
}

impl Elected {
    /// A replica reading and writing the API server with `client`, a standby until
    /// [`Elected::run`] wins the Lease of `config.leaderElection`.
    pub fn new(config: crate::Config, client: kube::Client) -> Self {
        let (status, leadership) = channel();
        Self {
            config,
            client,
            status,
            leadership,
        }
    }

    /// This replica's leadership (whether it leads, who holds the Lease), for health and
    /// metrics.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// [`run_as_leader`] with this replica's configuration, client and status: `lead` runs
    /// while the replica holds the Lease named after `identity` (unless `leaderElection`
    /// names another), until `shutdown`.
    ///
    /// # Errors
    /// As [`run_as_leader`]: an invalid `leaderElection`, a lost Lease, or what `lead`
    /// returns.
    pub async fn run<F, E>(
        self,
        identity: &crate::Identity,
        shutdown: CancellationToken,
        lead: impl FnOnce(crate::Config, kube::Client, CancellationToken) -> F,
    ) -> Result<(), E>
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: From<crate::Error> + Send + 'static,
    {
        run_as_leader(
            self.config,
            identity,
            self.client,
            self.status,
            shutdown,
            lead,
        )
        .await
    }
}
