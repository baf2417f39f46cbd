//! The Lease as a lock (client-go's `LeaseLock` with `tryAcquireOrRenew` and `release`):
//! reads and resourceVersion-guarded writes of one Lease, and what this replica last saw of
//! it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::time::{Duration, Instant};
use tracing::{debug, info, warn};

use super::record::{self, Decision, Observed};
use super::{LeaderElectionConfig, Status, StatusSender};

/// One Lease, used as the lock of an election by the replica `identity`.
pub(crate) struct LeaseLock {
    api: Api<Lease>,
    /// The Lease's name.
    pub name: String,
    namespace: String,
    /// This replica's identity.
    pub identity: String,
    duration_seconds: i32,
    release_timeout: Duration,
    /// Where the replica's leadership is published.
    pub status: StatusSender,
    observed: Option<Observed>,
}

impl LeaseLock {
    /// The Lease `name` of `config` through `client`, for `identity`, publishing to `status`.
    pub(crate) fn new(
        config: &LeaderElectionConfig,
        name: String,
        identity: String,
        client: kube::Client,
        status: StatusSender,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &config.lease_namespace),
            name,
            namespace: config.lease_namespace.clone(),
            identity,
            duration_seconds: config.lease_duration_seconds(),
            release_timeout: config.renew_deadline,
            status,
            observed: None,
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
    pub(crate) async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let seconds = self.duration_seconds;
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
                    namespace: Some(self.namespace.clone()),
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
    pub(crate) async fn release(&mut self) {
        let Some(seen) = self.observed.as_ref().filter(|s| s.held_by(&self.identity)) else {
            return;
        };
        let mut lease = seen.lease.clone();
        lease.spec = Some(record::released(lease.spec.as_ref(), Timestamp::now()));
        let params = PostParams::default();
        let call = self.api.replace(&self.name, &params, &lease);
        match tokio::time::timeout(self.release_timeout, call).await {
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
