//! The election loop ([`Elector::run`]): acquire the Lease as a standby, run the leader's
//! work while renewing it, stop the work when the Lease is lost, release it on shutdown.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::config::JITTER_FACTOR;
use super::record::{self, Decision, Observed};
use super::{Error, LeaderElectionConfig, Status, StatusSender};

/// One replica's participant in the election of a Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    config: LeaderElectionConfig,
    status: StatusSender,
    observed: Option<Observed>,
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
        Ok(Self {
            api: Api::namespaced(client, &config.lease_namespace),
            name: config.lease_name_or(controller).to_owned(),
            identity: config.resolve_identity(),
            config: config.clone(),
            status,
            observed: None,
        })
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
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
            self.status.set(Status {
                leading: true,
                holder: None,
            });
            let result = lead(shutdown).await;
            self.status.set(Status::default());
            return result;
        }
        info!(lease = %self.name, namespace = %self.config.lease_namespace,
            identity = %self.identity, "leader election: waiting to acquire the lease");
        if !self.acquire(&shutdown).await {
            return Ok(());
        }
        let stop = shutdown.child_token();
        let mut work = tokio::spawn(lead(stop.clone()));
        match self.renew_while(&mut work).await {
            Term::Ended(joined) => {
                self.release().await;
                joined.map_err(|e| crate::Error::Leader(Error::Work(e)))?
            }
            Term::Lost(reason) => {
                stop.cancel();
                error!(lease = %self.name, identity = %self.identity, %reason,
                    "leader election: lost the lease; stopped leading");
                let _ = work.await;
                let lost = Error::Lost {
                    namespace: self.config.lease_namespace.clone(),
                    lease: self.name.clone(),
                    identity: self.identity.clone(),
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
                r = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(true)) => {
                    info!(lease = %self.name, identity = %self.identity,
                        "leader election: became leader");
                    return true;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => {
                    warn!(%error, lease = %self.name, "leader election: cannot acquire the lease")
                }
                Err(_) => warn!(lease = %self.name, "leader election: acquiring timed out"),
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
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    renewed = Instant::now();
                    debug!(lease = %self.name, "leader election: renewed");
                    continue;
                }
                Ok(Ok(false)) => {
                    let holder = self.status.current().holder.unwrap_or_default();
                    return Term::Lost(format!("the lease is held by {holder:?}"));
                }
                Ok(Err(error)) => {
                    warn!(%error, lease = %self.name, "leader election: renewal failed");
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

    /// client-go's `tryAcquireOrRenew`: `true` when this replica holds the Lease afterwards,
    /// `false` when another holder's term runs.
    ///
    /// A leader whose own term is still valid first writes over the object it last saw (one
    /// call); if that fails, or otherwise, the Lease is read (created when missing), and
    /// written when [`Observed::decide`] allows. Every write is guarded by the
    /// `resourceVersion` read.
    ///
    /// # Errors
    /// API errors, including a conflict (another replica wrote first).
    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let seconds = self.config.lease_duration_seconds();
        if let Some(seen) = &self.observed
            && seen.held_by(&self.identity)
            && seen.valid_at(Instant::now())
        {
            let mut lease = seen.lease.clone();
            let spec = record::next_term(
                lease.spec.as_ref(),
                &self.identity,
                Timestamp::now(),
                seconds,
            );
            lease.spec = Some(spec);
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.observe(written);
                    return Ok(true);
                }
                Err(error) => {
                    debug!(%error, "leader election: fast renewal failed; reading the lease")
                }
            }
        }
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.config.lease_namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(record::next_term(
                    None,
                    &self.identity,
                    Timestamp::now(),
                    seconds,
                )),
            };
            let created = self.api.create(&PostParams::default(), &lease).await?;
            self.observe(created);
            return Ok(true);
        };
        self.observe(current);
        let Some(seen) = &self.observed else {
            return Ok(false);
        };
        match seen.decide(&self.identity, Instant::now(), Timestamp::now(), seconds) {
            Decision::Held(_) => Ok(false),
            Decision::Write(spec) => {
                let mut lease = seen.lease.clone();
                lease.spec = Some(spec);
                let written = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
                self.observe(written);
                Ok(true)
            }
        }
    }

    /// Gives the Lease up if this replica holds it (client-go's `release`); a failure is
    /// logged (the Lease then expires after `leaseDuration`).
    async fn release(&mut self) {
        let Some(seen) = self.observed.as_ref().filter(|s| s.held_by(&self.identity)) else {
            return;
        };
        let mut lease = seen.lease.clone();
        lease.spec = Some(record::released(lease.spec.as_ref(), Timestamp::now()));
        let params = PostParams::default();
        let call = self.api.replace(&self.name, &params, &lease);
        match tokio::time::timeout(self.config.renew_deadline, call).await {
            Ok(Ok(written)) => {
                self.observe(written);
                info!(lease = %self.name, identity = %self.identity,
                    "leader election: released the lease");
            }
            Ok(Err(error)) => warn!(%error, lease = %self.name,
                "leader election: cannot release the lease; it expires after leaseDuration"),
            Err(_) => warn!(lease = %self.name,
                "leader election: releasing timed out; the lease expires after leaseDuration"),
        }
        self.status.set(Status {
            leading: false,
            holder: self
                .observed
                .as_ref()
                .and_then(|s| s.holder())
                .map(str::to_owned),
        });
    }

    /// Records `lease` as the last seen object, and publishes (and logs) a change of holder
    /// or of this replica's leadership.
    fn observe(&mut self, lease: Lease) {
        let seen = Observed::read(self.observed.as_ref(), lease, Instant::now());
        let holder = seen.holder().map(str::to_owned);
        let leading = seen.held_by(&self.identity);
        self.observed = Some(seen);
        let before = self.status.current();
        if !self.status.set(Status {
            leading,
            holder: holder.clone(),
        }) {
            return;
        }
        if before.holder != holder {
            info!(lease = %self.name, holder = holder.as_deref().unwrap_or(""),
                "leader election: new holder observed");
        }
        if before.leading != leading {
            info!(lease = %self.name, identity = %self.identity, leading,
                "leader election: leadership changed");
        }
    }
}

/// `period` plus up to 1.2 × `period` of random jitter (client-go's `wait.JitterUntil`).
fn jittered(period: Duration) -> Duration {
    let factor = rand::rng().random_range(0.0..=JITTER_FACTOR);
    period + period.mul_f64(factor)
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
