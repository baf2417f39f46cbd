//! The `operations.kubeedge.io` job controllers (KubeEdge's task manager on the cloud side):
//! every NodeUpgradeJob, ImagePrePullJob and ConfigUpdateJob is checked field by field
//! ([`validate`]) before anything happens. An invalid job ends at once in phase `Failure`
//! with the field's name in its reason; a valid one gets phase `Init` and one `Pending` entry
//! per selected edge node ([`selection`]), or `Failure` for a named node that is not an edge
//! node. Sending the tasks to the nodes is not done yet (docs/fleet.md).
//!
//! A job's status is written once per change of its spec; a job in a final phase is left
//! alone, as in KubeEdge.

pub mod selection;
pub mod validate;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::operations::{
    ConfigNodeStatus, ConfigUpdateJob, ImagePrePullJob, JobPhase, NodeTaskPhase, NodeUpgradeJob,
    PrePullNodeStatus, UpgradeNodeStatus,
};
use crate::{Error, Result};
use selection::Selected;
use validate::{Invalid, Targets};

/// A job kind: how to check it and how its status reads and is written.
trait Job:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// The kind's entry per node.
    type NodeStatus: Serialize;
    /// The parsed targets, or the first invalid field.
    fn check(&self) -> std::result::Result<Targets, Invalid>;
    /// The phase written so far, if any.
    fn phase(&self) -> Option<JobPhase>;
    /// A node's entry.
    fn node_status(node: &str, phase: NodeTaskPhase, reason: &str) -> Self::NodeStatus;
}

impl Job for NodeUpgradeJob {
    type NodeStatus = UpgradeNodeStatus;
    fn check(&self) -> std::result::Result<Targets, Invalid> {
        validate::upgrade(&self.spec).map(|u| u.targets)
    }
    fn phase(&self) -> Option<JobPhase> {
        self.status.as_ref().map(|s| s.phase)
    }
    fn node_status(node: &str, phase: NodeTaskPhase, reason: &str) -> UpgradeNodeStatus {
        UpgradeNodeStatus {
            node_name: node.to_owned(),
            phase,
            reason: reason.to_owned(),
            ..UpgradeNodeStatus::default()
        }
    }
}

impl Job for ImagePrePullJob {
    type NodeStatus = PrePullNodeStatus;
    fn check(&self) -> std::result::Result<Targets, Invalid> {
        validate::prepull(&self.spec).map(|p| p.targets)
    }
    fn phase(&self) -> Option<JobPhase> {
        self.status.as_ref().map(|s| s.phase)
    }
    fn node_status(node: &str, phase: NodeTaskPhase, reason: &str) -> PrePullNodeStatus {
        PrePullNodeStatus {
            node_name: node.to_owned(),
            phase,
            reason: reason.to_owned(),
            ..PrePullNodeStatus::default()
        }
    }
}

impl Job for ConfigUpdateJob {
    type NodeStatus = ConfigNodeStatus;
    fn check(&self) -> std::result::Result<Targets, Invalid> {
        validate::config_update(&self.spec).map(|c| c.targets)
    }
    fn phase(&self) -> Option<JobPhase> {
        self.status.as_ref().map(|s| s.phase)
    }
    fn node_status(node: &str, phase: NodeTaskPhase, reason: &str) -> ConfigNodeStatus {
        ConfigNodeStatus {
            node_name: node.to_owned(),
            phase,
            reason: reason.to_owned(),
            ..ConfigNodeStatus::default()
        }
    }
}

struct Context {
    client: Client,
    nodes: Store<Node>,
}

/// Runs the three job controllers until `shutdown`. They need list/watch on
/// `nodeupgradejobs`, `imageprepulljobs` and `configupdatejobs` and patch on their `/status`,
/// and list/watch on `nodes` (deploy/cloud/access/rbac.yaml).
pub async fn run(client: Client, shutdown: CancellationToken) {
    let (nodes, writer) = reflector::store();
    let node_watch = reflector(
        writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .for_each(|_| async {});
    let context = Arc::new(Context { client, nodes });
    let stop = shutdown.clone();
    tokio::select! {
        () = node_watch => {}
        () = stop.cancelled() => {}
        () = async {
            tokio::join!(
                control::<NodeUpgradeJob>(context.clone(), shutdown.clone()),
                control::<ImagePrePullJob>(context.clone(), shutdown.clone()),
                control::<ConfigUpdateJob>(context.clone(), shutdown.clone()),
            );
        } => {}
    }
}

async fn control<J: Job>(context: Arc<Context>, shutdown: CancellationToken) {
    if context.nodes.wait_until_ready().await.is_err() {
        return;
    }
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
    Action::requeue(Duration::from_secs(15))
}

async fn reconcile<J: Job>(job: Arc<J>, context: Arc<Context>) -> Result<Action> {
    if job.phase().is_some() {
        // Final, or accepted with its nodes: sending the tasks is not implemented yet.
        return Ok(Action::await_change());
    }
    let name = job.name_any();
    let status = match job.check() {
        Err(invalid) => {
            info!(job = %name, %invalid, "job refused");
            json!({"phase": JobPhase::Failure, "reason": format!("invalid spec: {invalid}")})
        }
        Ok(targets) => {
            let nodes = context.nodes.state();
            let selected = selection::select(&targets.selection, nodes.iter().map(|n| &**n));
            initial_status::<J>(&selected, targets.failure_tolerate)
        }
    };
    let api = Api::<J>::all(context.client.clone());
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(Error::kube("patch job status"))?;
    Ok(Action::await_change())
}

/// The first status of a valid job: `Pending` per selected edge node, `Failure` per named
/// node that is not one; the job fails at once when more than `tolerate` of its nodes failed
/// or it selects none.
fn initial_status<J: Job>(selected: &Selected, tolerate: f64) -> serde_json::Value {
    let mut entries: Vec<serde_json::Value> = Vec::new();
    for node in &selected.edge_nodes {
        entries.push(json!(J::node_status(node, NodeTaskPhase::Pending, "")));
    }
    for node in &selected.missing {
        let entry = J::node_status(node, NodeTaskPhase::Failure, "no edge node of this name");
        entries.push(json!(entry));
    }
    let total = selected.edge_nodes.len() + selected.missing.len();
    let phase = selection::job_phase(total, selected.missing.len(), 0, tolerate);
    let reason = if total == 0 {
        "selects no edge node".to_owned()
    } else if phase == JobPhase::Failure {
        format!(
            "{} of {total} nodes failed, more than failureTolerate allows",
            selected.missing.len()
        )
    } else {
        String::new()
    };
    json!({"phase": phase, "nodeStatus": entries, "reason": reason})
}
