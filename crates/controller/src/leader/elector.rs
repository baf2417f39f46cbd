//! The election loop ([`Elector::run`]): acquire the Lease as a standby, run the leader's
//! work while renewing it, stop the work when the Lease is lost, release it on shutdown.

use std::future::Future;

use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::config::JITTER_FACTOR;
use super::lock::LeaseLock;
use super::{Error, LeaderElectionConfig, Status, StatusSender};

/// One replica's participant in the election of a Lease.
pub struct Elector {
    config: LeaderElectionConfig,
    lock: LeaseLock,
}

/// How the leader's term ended.
enum Term<E> {
    /// The work returned (after shutdown, or on its own).
    Ended(Result<Result<(), E>, tokio::task::JoinError>),
    /// The Lease was lost; why.
    Lost(String),
}

impl Elector {
    /// A participant for `controller` (the default Lease name) with `config`, reading and
    /// writing Leases through `client` (it needs get, create and update on `leases` in the
    /// Lease's namespace), publishing its state to `status`.
    ///
    /// # Errors
    /// [`Error::Config`] when the configuration breaks a rule
    /// ([`LeaderElectionConfig::validate`]).
    pub fn new(
        config: &LeaderElectionConfig,
        controller: &str,
        client: kube::Client,
        status: StatusSender,
    ) -> Result<Self, Error> {
        config.validate()?;
        let name = config.lease_name_or(controller).to_owned();
        let lock = LeaseLock::new(config, name, config.resolve_identity(), client, status);
        Ok(Self {
            config: config.clone(),
            lock,
        })
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.lock.identity
    }

    /// Runs `lead` while this replica leads, until `shutdown`.
    ///
    /// Without leader election (`leaderElect: false`) `lead` runs at once with `shutdown`.
    /// Otherwise the replica waits as a standby until it acquires the Lease (returning
    /// `Ok(())` if `shutdown` comes first), then runs `lead` with a token cancelled at
    /// `shutdown` or when the Lease is lost, renewing the Lease until `lead` returned, and
    /// then releases it.
    ///
    /// # Errors
    /// What `lead` returned; [`Error::Lost`] (as `E`) when the Lease was lost while leading
    /// (`lead` was stopped first); [`Error::Work`] when `lead` panicked.
    pub async fn run<F, E>(
        mut self,
        shutdown: CancellationToken,
        lead: impl FnOnce(CancellationToken) -> F,
    ) -> Result<(), E>
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: From<crate::Error> + Send + 'static,
    {
        if !self.config.leader_elect {
            self.lock.status.set(Status {
                leading: true,
                holder: None,
            });
            let result = lead(shutdown).await;
            self.lock.status.set(Status::default());
            return result;
        }
        info!(lease = %self.lock.name, namespace = %self.config.lease_namespace,
            identity = %self.lock.identity, "leader election: waiting to acquire the lease");
        if !self.acquire(&shutdown).await {
            return Ok(());
        }
        let stop = shutdown.child_token();
        let mut work = verge_runtime::tasks::spawn("leader work", lead(stop.clone()));
        match self.renew_while(&mut work).await {
            Term::Ended(joined) => {
                self.lock.release().await;
                joined.map_err(|e| crate::Error::Leader(Error::Work(e)))?
            }
            Term::Lost(reason) => {
                stop.cancel();
                error!(lease = %self.lock.name, identity = %self.lock.identity, %reason,
                    "leader election: lost the lease; stopped leading");
                let _ = work.await;
                let lost = Error::Lost {
                    namespace: self.config.lease_namespace.clone(),
                    lease: self.lock.name.clone(),
                    identity: self.lock.identity.clone(),
                    reason,
                };
                Err(crate::Error::Leader(lost).into())
            }
        }
    }

    /// Tries every jittered `retryPeriod` until this replica holds the Lease (`true`) or
    /// `shutdown` (`false`).
    async fn acquire(&mut self, shutdown: &CancellationToken) -> bool {
        loop {
            let attempt = tokio::select! {
                () = shutdown.cancelled() => return false,
                r = tokio::time::timeout(self.config.renew_deadline, self.lock.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(true)) => {
                    info!(lease = %self.lock.name, identity = %self.lock.identity,
                        "leader election: became leader");
                    return true;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => {
                    warn!(%error, lease = %self.lock.name, "leader election: cannot acquire the lease")
                }
                Err(_) => warn!(lease = %self.lock.name, "leader election: acquiring timed out"),
            }
            let delay = jittered(self.config.retry_period);
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Renews every `retryPeriod` until `work` ends, or until the Lease is lost: no renewal
    /// for `renewDeadline`, or another holder seen.
    async fn renew_while<E>(&mut self, work: &mut JoinHandle<Result<(), E>>) -> Term<E> {
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                biased;
                joined = &mut *work => return Term::Ended(joined),
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let deadline = renewed + self.config.renew_deadline;
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lock.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    renewed = Instant::now();
                    debug!(lease = %self.lock.name, "leader election: renewed");
                    continue;
                }
                Ok(Ok(false)) => {
                    let holder = self.lock.status.current().holder.unwrap_or_default();
                    return Term::Lost(format!("the lease is held by {holder:?}"));
                }
                Ok(Err(error)) => {
                    warn!(%error, lease = %self.lock.name, "leader election: renewal failed");
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Term::Lost(format!(
                    "not renewed within the renew deadline of {:?}",
                    self.config.renew_deadline
                ));
            }
        }
    }
}

/// `period` plus up to 1.2 × `period` of random jitter (client-go's `wait.JitterUntil`).
fn jittered(period: Duration) -> Duration {
    let factor = rand::rng().random_range(0.0..=JITTER_FACTOR);
    period + period.mul_f64(factor)
}

/// What both controllers' `run` does: elects on the Lease of `config.leaderElection`
/// (default name: the controller's hello name, [`crate::Config::name_for`]) and runs
/// `lead(config, client, stop)` while this replica leads; see [`Elector::run`] for the
/// shutdown and lost-Lease behaviour.
///
/// # Errors
/// An invalid `leaderElection` ([`crate::Error::Leader`]), a lost Lease, or what `lead`
/// returns.
pub async fn run_as_leader<F, E>(
    config: crate::Config,
    identity: &crate::Identity,
    client: kube::Client,
    status: StatusSender,
    shutdown: CancellationToken,
    lead: impl FnOnce(crate::Config, kube::Client, CancellationToken) -> F,
) -> Result<(), E>
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: From<crate::Error> + Send + 'static,
{
    let name = config.name_for(identity).to_owned();
    let elector = Elector::new(&config.leader_election, &name, client.clone(), status)
        .map_err(|e| E::from(crate::Error::from(e)))?;
    elector
        .run(shutdown, move |stop| lead(config, client, stop))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_client_go_s_bounds() {
        let period = Duration::from_secs(2);
        for _ in 0..100 {
            let d = jittered(period);
            assert!(
                d >= period && d <= period.mul_f64(1.0 + JITTER_FACTOR),
                "{d:?}"
            );
        }
    }
}
