//! The node Lease renewer: while an edge node's session lives, edgecontroller renews its
//! `kube-node-lease` Lease for it, so the edge sends its Lease once per session instead of
//! every few seconds (docs/protocol.md, "Messages").
//!
//! The node's renewal parameters (holderIdentity, leaseDurationSeconds) come from the edge's
//! Lease message, applied by [`crate::upstream::lease`]; the session's start and end come
//! from the dispatcher ([`verge_controller::dispatch::Handler::on_session`]). [`run`] renews
//! every connected node with one merge patch (`spec.renewTime`, `holderIdentity`,
//! `leaseDurationSeconds`; no read) every quarter of its `leaseDurationSeconds` (the kubelet's
//! renew interval), spread over the interval ([`schedule`]), at most [`MAX_IN_FLIGHT`]
//! patches at a time. A failed patch is logged and tried again at the node's next turn; a
//! 404 stops the node's renewals until its edge sends its Lease again (next session). A node
//! whose session ends is renewed no more, so its Lease expires and kube-controller-manager
//! marks it NotReady after its node-monitor-grace-period, as for a kubelet that stopped.
//!
//! The schedule lives as long as the leader's term ([`crate::EdgeController::run`]): a
//! replica that loses leadership stops renewing, and the new leader adopts the Leases of the
//! nodes connected when it attaches (their edges sent their Lease messages to the former
//! leader): see [`schedule::Action::Adopt`].

pub mod schedule;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info_span, warn};
use verge_core::NODE_LEASE_NAMESPACE;
use verge_runtime::ErrorChain;

use crate::node_clients::NodeClients;
use crate::upstream::lease::{self, Renewal};
use schedule::{Action, Job, Outcome, Params, Schedule};

/// At most this many renewals run at once.
pub const MAX_IN_FLIGHT: usize = 16;

/// The renewer's shared schedule; cheap to clone. Fed by the upstream handler and the
/// dispatcher, executed by [`run`].
#[derive(Clone)]
pub struct Renewer {
    shared: Arc<Shared>,
}

struct Shared {
    schedule: Mutex<Schedule>,
    /// Wakes [`run`] when the schedule changed.
    changed: Notify,
}

impl Default for Renewer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Renewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer")
            .field("nodes", &self.lock().len())
            .finish()
    }
}

impl Renewer {
    /// An empty renewer.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                schedule: Mutex::new(Schedule::new(Instant::now())),
                changed: Notify::new(),
            }),
        }
    }

    /// `node`'s session started (or a newer one replaced it).
    pub fn connected(&self, node: &str) {
        self.lock().connected(node, Instant::now());
        self.shared.changed.notify_one();
    }

    /// `node`'s session ended: its Lease is renewed no more.
    pub fn disconnected(&self, node: &str) {
        self.lock().disconnected(node);
    }

    /// The edge's Lease message `renewal` of `node` was applied (`applied`) or refused; from
    /// now on the renewer renews it with the same parameters while the session lives.
    pub fn lease_message(&self, node: &str, renewal: &Renewal, applied: bool) {
        let params = params(renewal);
        if self
            .lock()
            .lease_message(node, params, applied, Instant::now())
        {
            self.shared.changed.notify_one();
        } else {
            debug!(%node, "lease message of an ended session: not renewed");
        }
    }

    /// Number of connected nodes it renews (or adopts).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no node is connected.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, Schedule> {
        // Nothing panics while holding it; a poisoned schedule is still consistent.
        self.shared
            .schedule
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Renews the Leases of `renewer`'s nodes, each as the node itself (`clients`), until `stop`;
/// see the module docs.
pub async fn run(renewer: Renewer, clients: NodeClients, stop: CancellationToken) {
    let mut running: JoinSet<(Job, Outcome)> = JoinSet::new();
    loop {
        let next = if running.len() < MAX_IN_FLIGHT {
            renewer.lock().next_due()
        } else {
            None
        };
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => break,
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok((job, outcome)) = done {
                    renewer.lock().finished(&job, outcome, Instant::now());
                }
            }
            () = renewer.shared.changed.notified() => {}
            () = due => {
                let room = MAX_IN_FLIGHT - running.len();
                let jobs = renewer.lock().take_due(Instant::now(), room);
                for job in jobs {
                    let span = info_span!("lease_renewal", node = %job.node);
                    // As the node itself: the Node authorizer lets it write only its Lease.
                    let client = clients.of(&job.node);
                    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
                    running.spawn(
                        async move {
                            let outcome = execute(&client, &leases, &job).await;
                            (job, outcome)
                        }
                        .instrument(span),
                    );
                }
            }
        }
    }
    running.shutdown().await;
    debug!("lease renewer stopped");
}

/// One turn of `job.node`.
async fn execute(client: &kube::Client, leases: &Api<Lease>, job: &Job) -> Outcome {
    let node = job.node.as_str();
    let (patch, adopt) = match &job.action {
        Action::Create(params) => {
            return match lease::renew(client, node, &renewal(params)).await {
                Ok(()) => Outcome::Renewed(None),
                Err(error) => {
                    warn!(error = %ErrorChain(&error), "node lease renewal failed; next turn tries again");
                    Outcome::Failed
                }
            };
        }
        Action::Renew(params) => (renewal(params).patch(None), false),
        Action::Adopt => (json!({ "spec": { "renewTime": lease::now() } }), true),
    };
    match leases
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(stored) if adopt => {
            // The stored Lease's holder and duration, with the defaults an edge's gets.
            let params = params(&Renewal::from_lease(node, stored));
            debug!(?params, "node lease adopted");
            Outcome::Renewed(Some(params))
        }
        Ok(_) => Outcome::Renewed(None),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            if adopt {
                debug!("no node lease to adopt; waiting for the edge's");
            } else {
                warn!("node lease gone; not renewed until the edge sends it again");
            }
            Outcome::NotFound
        }
        Err(error) => {
            warn!(error = %ErrorChain(&error), "node lease renewal failed; next turn tries again");
            Outcome::Failed
        }
    }
}

/// The renewal parameters of `renewal`.
fn params(renewal: &Renewal) -> Params {
    Params {
        holder_identity: renewal.holder_identity.clone(),
        lease_duration_seconds: renewal.lease_duration_seconds,
    }
}

/// A renewal with `params`, now.
fn renewal(params: &Params) -> Renewal {
    Renewal {
        holder_identity: params.holder_identity.clone(),
        lease_duration_seconds: params.lease_duration_seconds,
        renew_time: lease::now(),
    }
}
