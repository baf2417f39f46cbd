//! The `operations.kubeedge.io` jobs (KubeEdge's task manager): NodeUpgradeJob,
//! ImagePrePullJob and ConfigUpdateJob, each checked field by field ([`validate`]) before
//! anything happens, given their edge nodes ([`selection`]), and carried out by the nodes
//! themselves: fleetcontroller sends each started node its task through cloudhub
//! ([`downstream`], group `fleet`) and writes the nodes' reports into the job's status
//! ([`upstream`]).
//!
//! The job's status is the state: a job controller per kind ([`run`]) writes the first status
//! (`Failure` naming an invalid field; else `Init` with an entry per selected node), reads a
//! pre-pull's registry credentials ([`credentials`]), and moves the job on
//! ([`progress::advance`]: `concurrency` nodes `InProgress` at a time, the job's phase from its
//! nodes'). Every write carries the job's resourceVersion; a job in a final phase is left alone.

pub mod cache;
pub mod credentials;
pub mod downstream;
pub mod progress;
pub mod selection;
pub mod tasks;
pub mod upstream;
pub mod validate;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_core::task::{JobKind, NodeTask};

use crate::api::operations::{
    BasicNodeStatus, ConfigNodeStatus, ConfigUpdateJob, ImagePrePullJob, JobPhase, JobStatus,
    NodeEntry, NodeTaskPhase, NodeUpgradeJob, PrePullNodeStatus, UpgradeNodeStatus,
};
use crate::{Error, Result};
use cache::{JobCaches, JobEvent};
use credentials::Credentials;
use selection::Selected;
use validate::{Invalid, Targets};

/// What a job's checks give: its targets and, for a pre-pull naming a Secret, the Secret and
/// the registries whose logins to keep.
pub(crate) struct Checked {
    targets: Targets,
    secret: Option<(String, String, BTreeSet<String>)>,
}

/// A job kind: how to check it, how its status reads, and its task.
pub(crate) trait Job:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// The kind's entry per node.
    type Node: NodeEntry;
    /// The kind.
    const KIND: JobKind;
    /// The parsed spec, or the first invalid field.
    fn check(&self) -> std::result::Result<Checked, Invalid>;
    /// The status written so far.
    fn status(&self) -> Option<&JobStatus<Self::Node>>;
    /// A node's task (`credentials` hold a pre-pull's logins); `None` when it cannot be made
    /// (an invalid spec, logins not read yet).
    fn task(&self, credentials: &Credentials) -> Option<NodeTask>;
}

impl Job for NodeUpgradeJob {
    type Node = UpgradeNodeStatus;
    const KIND: JobKind = JobKind::NodeUpgradeJob;
    fn check(&self) -> std::result::Result<Checked, Invalid> {
        validate::upgrade(&self.spec).map(|u| Checked {
            targets: u.targets,
            secret: None,
        })
    }
    fn status(&self) -> Option<&JobStatus<UpgradeNodeStatus>> {
        self.status.as_ref()
    }
    fn task(&self, _credentials: &Credentials) -> Option<NodeTask> {
        tasks::upgrade(&self.spec)
    }
}

impl Job for ImagePrePullJob {
    type Node = PrePullNodeStatus;
    const KIND: JobKind = JobKind::ImagePrePullJob;
    fn check(&self) -> std::result::Result<Checked, Invalid> {
        validate::prepull(&self.spec).map(|p| {
            let registries = p.images.iter().map(credentials::registry_of).collect();
            Checked {
                targets: p.targets,
                secret: p.secret.map(|(ns, name)| (ns, name, registries)),
            }
        })
    }
    fn status(&self) -> Option<&JobStatus<PrePullNodeStatus>> {
        self.status.as_ref()
    }
    fn task(&self, credentials: &Credentials) -> Option<NodeTask> {
        let auths = credentials.get(&self.uid().unwrap_or_default());
        tasks::prepull(&self.spec, auths)
    }
}

impl Job for ConfigUpdateJob {
    type Node = ConfigNodeStatus;
    const KIND: JobKind = JobKind::ConfigUpdateJob;
    fn check(&self) -> std::result::Result<Checked, Invalid> {
        validate::config_update(&self.spec).map(|c| Checked {
            targets: c.targets,
            secret: None,
        })
    }
    fn status(&self) -> Option<&JobStatus<ConfigNodeStatus>> {
        self.status.as_ref()
    }
    fn task(&self, _credentials: &Credentials) -> Option<NodeTask> {
        tasks::config_update(&self.spec)
    }
}

/// The status of `job` as JSON.
fn status_json<J: Job>(job: &J) -> Option<Value> {
    job.status().and_then(|s| serde_json::to_value(s).ok())
}

/// A node's entry of kind `J`.
fn node_status<J: Job>(node: &str, phase: NodeTaskPhase, reason: &str) -> J::Node {
    J::Node::with(BasicNodeStatus {
        node_name: node.to_owned(),
        phase,
        reason: reason.to_owned(),
        action_flow: Vec::new(),
    })
}

struct Context {
    client: Client,
    caches: JobCaches,
    credentials: Credentials,
    /// Tells the downstream task that credentials were read (no job event may follow).
    events: mpsc::Sender<JobEvent>,
}

/// Runs the three job controllers until `shutdown`, over `caches` (for the edge Nodes),
/// filling `credentials` and telling `events` when they did. They need list/watch on
/// `nodeupgradejobs`, `imageprepulljobs` and `configupdatejobs`, patch on their `/status`,
/// and get on the Secrets pre-pulls name (deploy/cloud/access/rbac.yaml).
pub async fn run(
    client: Client,
    caches: JobCaches,
    credentials: Credentials,
    events: mpsc::Sender<JobEvent>,
    shutdown: CancellationToken,
) {
    if caches.wait_ready().await.is_err() {
        return;
    }
    info!("job controllers running");
    let context = Arc::new(Context {
        client,
        caches,
        credentials,
        events,
    });
    tokio::join!(
        control::<NodeUpgradeJob>(context.clone(), shutdown.clone()),
        control::<ImagePrePullJob>(context.clone(), shutdown.clone()),
        control::<ConfigUpdateJob>(context, shutdown),
    );
}

async fn control<J: Job>(context: Arc<Context>, shutdown: CancellationToken) {
    Controller::new(
        Api::<J>::all(context.client.clone()),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(shutdown.cancelled_owned())
    .run(reconcile::<J>, error_policy::<J>, context)
    .for_each(|result| async move {
        if let Err(error) = result {
            warn!(error = %error, kind = %J::kind(&()), "job reconcile failed");
        }
    })
    .await;
}

fn error_policy<J: Job>(_job: Arc<J>, _error: &Error, _context: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile<J: Job>(job: Arc<J>, context: Arc<Context>) -> Result<Action> {
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let old = status_json(job.as_ref());
    let phase = old
        .as_ref()
        .and_then(|s| serde_json::from_value::<JobPhase>(s["phase"].clone()).ok());
    if phase.is_some_and(JobPhase::is_final) {
        context.credentials.forget(&uid);
        return Ok(Action::await_change());
    }
    let checked = match job.check() {
        Ok(checked) => checked,
        Err(invalid) => {
            info!(job = %name, %invalid, "job refused");
            let status = json!({"phase": JobPhase::Failure,
                                "reason": format!("invalid spec: {invalid}")});
            return write_status(job.as_ref(), &context, status).await;
        }
    };
    if let Some((ns, secret, registries)) = &checked.secret
        && context.credentials.get(&uid).is_none()
    {
        match credentials::fetch(&context.client, ns, secret, registries).await {
            Ok(auths) => {
                context.credentials.insert(&uid, auths);
                // The downstream task may now make the job's tasks.
                let _ = context.events.try_send(JobEvent::Job);
            }
            Err(reason) => {
                info!(job = %name, %reason, "pull secret refused");
                let status = json!({"phase": JobPhase::Failure, "reason":
                    format!("spec.imagePrePullTemplate.imageSecrets: {reason}")});
                return write_status(job.as_ref(), &context, status).await;
            }
        }
    }
    let mut status = match old {
        Some(status) => status,
        None => {
            let nodes = context.caches.nodes.state();
            let selected =
                selection::select(&checked.targets.selection, nodes.iter().map(|n| &**n));
            initial_status::<J>(&selected)
        }
    };
    let first = job.status().is_none();
    let moved = progress::advance(
        &mut status,
        checked.targets.concurrency,
        checked.targets.failure_tolerate,
    );
    if first || moved {
        return write_status(job.as_ref(), &context, status).await;
    }
    Ok(Action::await_change())
}

/// Merge-patches `status` (phase, reason, node entries) with the job's resourceVersion as
/// precondition (a conflict is retried by the controller).
async fn write_status<J: Job>(job: &J, context: &Context, status: Value) -> Result<Action> {
    let api = Api::<J>::all(context.client.clone());
    let mut written = json!({"phase": status["phase"], "reason": status["reason"]});
    if let Some(entries) = status.get("nodeStatus") {
        written["nodeStatus"] = entries.clone();
    }
    let patch = json!({
        "metadata": {"resourceVersion": job.resource_version()},
        "status": written,
    });
    api.patch_status(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("patch job status"))?;
    Ok(Action::await_change())
}

/// The first status of a valid job: `Pending` per selected edge node, `Failure` per named
/// node that is not one (the job's phase is then set by [`progress::advance`], which fails
/// it when it selects no edge node or too many of its nodes failed).
fn initial_status<J: Job>(selected: &Selected) -> Value {
    let mut entries: Vec<Value> = Vec::new();
    for node in &selected.edge_nodes {
        entries.push(json!(node_status::<J>(node, NodeTaskPhase::Pending, "")));
    }
    for node in &selected.missing {
        let entry = node_status::<J>(node, NodeTaskPhase::Failure, "no edge node of this name");
        entries.push(json!(entry));
    }
    let reason = if entries.is_empty() {
        "selects no edge node"
    } else {
        ""
    };
    json!({"phase": JobPhase::Init, "nodeStatus": entries, "reason": reason})
}
