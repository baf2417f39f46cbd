//! The NodeGroup controller (KubeEdge's `nodegroup` controller of its controller-manager):
//! keeps each group's member Nodes labelled `apps.kubeedge.io/belonging-to`, its
//! pods off nodes that left it, and its status current. Every group is reconciled when it
//! changes, when any Node changes (debounced), and every 5 minutes. A group carries the
//! finalizer [`FINALIZER`] so its labels are removed before it goes.

pub mod membership;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api::{BELONGING_TO, NodeGroup};
use crate::{Error, Result};
use membership::Plan;

/// The finalizer on every NodeGroup (KubeEdge's).
pub const FINALIZER: &str = "apps.kubeedge.io/nodegroup-controller";

/// How often every group is reconciled even without a change.
const RESYNC: Duration = Duration::from_secs(300);

struct Context {
    client: Client,
    nodes: Store<Node>,
}

/// Runs the controller until `shutdown`. It needs get/list/watch/update/patch on
/// `nodegroups` and patch on `nodegroups/status`, list/watch/patch on `nodes`, and list and
/// delete on `pods` (deploy/cloud/access/rbac.yaml).
pub async fn run(client: Client, shutdown: CancellationToken) {
    let (nodes, writer) = reflector::store();
    let node_changes = reflector(
        writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let context = Arc::new(Context {
        client: client.clone(),
        nodes,
    });
    Controller::new(Api::<NodeGroup>::all(client), watcher::Config::default())
        .with_config(ControllerConfig::default().debounce(Duration::from_secs(1)))
        .reconcile_all_on(node_changes)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "nodegroup reconcile");
            }
        })
        .await;
}

async fn reconcile(group: Arc<NodeGroup>, context: Arc<Context>) -> Result<Action> {
    context
        .nodes
        .wait_until_ready()
        .await
        .map_err(|_| Error::Shutdown)?;
    let api = Api::<NodeGroup>::all(context.client.clone());
    finalizer(&api, FINALIZER, group, |event| async {
        match event {
            Event::Apply(group) => apply(&group, &context).await,
            Event::Cleanup(group) => cleanup(&group, &context).await,
        }
    })
    .await
    .map_err(|error| Error::Finalizer(Box::new(error)))
}

/// Labels and releases nodes, then writes the status if it changed.
async fn apply(group: &NodeGroup, context: &Context) -> Result<Action> {
    let name = group.name_any();
    let nodes = context.nodes.state();
    let plan = membership::plan(&name, &group.spec, nodes.iter().map(AsRef::as_ref));
    enact(&name, &plan, context).await?;
    if group.status.as_ref() != Some(&plan.status) {
        Api::<NodeGroup>::all(context.client.clone())
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": plan.status})),
            )
            .await
            .map_err(Error::kube("patch nodegroup status"))?;
    }
    Ok(Action::requeue(RESYNC))
}

/// Releases every node of a group being deleted.
async fn cleanup(group: &NodeGroup, context: &Context) -> Result<Action> {
    let name = group.name_any();
    let nodes = context.nodes.state();
    let plan = membership::release_all(&name, nodes.iter().map(AsRef::as_ref));
    enact(&name, &plan, context).await?;
    Ok(Action::await_change())
}

/// Patches the nodes' labels, then deletes the group's pods on released nodes (pods whose
/// nodeSelector pins them to the group; their Deployments place them again).
async fn enact(group: &str, plan: &Plan, context: &Context) -> Result<()> {
    let nodes = Api::<Node>::all(context.client.clone());
    for (node, edits) in &plan.labels {
        let patch = json!({"metadata": {"labels": edits}});
        match nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => tracing::info!(group, node, ?edits, "node labels"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::kube("patch node labels")(error)),
        }
    }
    let pods = Api::<Pod>::all(context.client.clone());
    for node in &plan.released {
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = pods
            .list(&on_node)
            .await
            .map_err(Error::kube("list pods"))?;
        for pod in list {
            let pinned = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(BELONGING_TO))
                .is_some_and(|g| g == group);
            if !pinned {
                continue;
            }
            let namespaced = Api::<Pod>::namespaced(
                context.client.clone(),
                &pod.namespace().unwrap_or_default(),
            );
            match namespaced
                .delete(&pod.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => tracing::info!(
                    group,
                    node,
                    pod = pod.name_any(),
                    "pod left the group's node"
                ),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(Error::kube("delete pod")(error)),
            }
        }
    }
    Ok(())
}

fn error_policy(group: Arc<NodeGroup>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(group = group.name_any(), error = %error.reason(), "nodegroup reconcile failed; retrying in 10 s");
    Action::requeue(Duration::from_secs(10))
}
