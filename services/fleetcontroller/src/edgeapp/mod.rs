//! The EdgeApplication controller (KubeEdge's `edgeapplication` controller of its
//! controller-manager): applies the objects [`render`] makes of each EdgeApplication by
//! server-side apply (field manager `fleetcontroller`, strict field validation, so a manifest
//! with an unknown field gets the API server's error), deletes those it made before and no
//! longer makes (remembered in the annotation [`CONTAINED`], as KubeEdge does), and writes
//! `status.workloadStatus`. A manifest that cannot be made gets a Warning event on the
//! EdgeApplication naming the manifest and the reason; the others are unaffected.
//!
//! Each EdgeApplication is reconciled when it or a Deployment it owns changes, and every 5
//! minutes (so an object deleted by hand comes back). Deleting an EdgeApplication deletes its
//! objects through their owner references (Kubernetes' garbage collector).

pub mod image;
pub mod overriders;
pub mod render;
pub mod status;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::edgeapp::{EdgeApplication, EdgeApplicationStatus, ResourceIdentifier};
use crate::{Error, Result};
use render::{Desired, Kind, Problem};

/// The EdgeApplication annotation listing, as a JSON array of identifiers, the objects it
/// made at its last reconcile (KubeEdge's).
pub const CONTAINED: &str = "apps.kubeedge.io/last-contained-resources";

/// The field manager of fleetcontroller's server-side applies.
pub const FIELD_MANAGER: &str = "fleetcontroller";

/// How often every EdgeApplication is reconciled even without a change.
const RESYNC: Duration = Duration::from_secs(300);

struct Context {
    client: Client,
    recorder: Recorder,
}

/// Runs the controller until `shutdown`. It needs get/list/watch/patch on `edgeapplications`
/// and patch on `edgeapplications/status`; list/watch on `deployments` and create/patch/
/// delete on `deployments`, `services`, `configmaps` and `secrets` (no read of secrets);
/// create/patch on `events.k8s.io` events (deploy/cloud/access/rbac.yaml).
pub async fn run(client: Client, shutdown: CancellationToken) {
    let reporter = Reporter {
        controller: crate::IDENTITY.name.to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let context = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
    });
    Controller::new(
        Api::<EdgeApplication>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Deployment>::all(client), watcher::Config::default())
    .graceful_shutdown_on(shutdown.cancelled_owned())
    .run(reconcile, error_policy, context)
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "edgeapplication reconcile");
        }
    })
    .await;
}

async fn reconcile(app: Arc<EdgeApplication>, context: Arc<Context>) -> Result<Action> {
    if app.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (app.namespace().unwrap_or_default(), app.name_any());
    let (desired, mut problems) = render::render(&app);
    let mut applied = Vec::with_capacity(desired.len());
    for object in &desired {
        match apply(&context.client, object).await {
            Ok(live) => applied.push((object.kind, object.id.clone(), Some(live))),
            Err(reason) => {
                problems.push(Problem {
                    ordinal: object.id.ordinal,
                    reason: format!("{} {:?}: {reason}", object.id.kind, object.id.name),
                });
                applied.push((object.kind, object.id.clone(), None));
            }
        }
    }
    let made: Vec<ResourceIdentifier> = desired.iter().map(|d| d.id.clone()).collect();
    let previous = contained(&app);
    delete_stale(&context.client, &previous, &made).await?;
    let apps = Api::<EdgeApplication>::namespaced(context.client.clone(), &namespace);
    if previous != made {
        let annotation = serde_json::to_string(&made).unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {CONTAINED: annotation}}});
        apps.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(Error::kube("annotate edgeapplication"))?;
    }
    let status = EdgeApplicationStatus {
        workload_status: status::workload_status(&applied, &problems),
    };
    if app.status.as_ref() != Some(&status) {
        apps.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .map_err(Error::kube("patch edgeapplication status"))?;
    }
    for problem in &problems {
        tracing::warn!(
            namespace,
            name,
            ordinal = problem.ordinal,
            reason = problem.reason,
            "manifest not made"
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidManifest".to_owned(),
            note: Some(note(problem)),
            action: "Apply".to_owned(),
            secondary: None,
        };
        if let Err(error) = context.recorder.publish(&event, &app.object_ref(&())).await {
            tracing::debug!(%error, "event not published");
        }
    }
    Ok(Action::requeue(RESYNC))
}

/// The event note of `problem`: `manifest <ordinal>: <reason>`, cut at a character boundary
/// to the API server's limit of 1 KiB.
fn note(problem: &Problem) -> String {
    const LIMIT: usize = 1024;
    let mut note = format!("manifest {}: {}", problem.ordinal, problem.reason);
    if note.len() > LIMIT {
        let mut end = LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// Server-side applies `object`; the live object, or the API server's reason.
async fn apply(client: &Client, object: &Desired) -> Result<Value, String> {
    let api = dynamic(client, object.kind, &object.id.namespace);
    let params = PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_strict();
    let object: DynamicObject =
        serde_json::from_value(object.object.clone()).map_err(|e| e.to_string())?;
    let live = api
        .patch(&object.name_any(), &params, &Patch::Apply(&object))
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })?;
    serde_json::to_value(live).map_err(|e| e.to_string())
}

/// Deletes the objects of `previous` that are not in `made` (compared by kind, namespace and
/// name, so an object that moved to another ordinal stays).
async fn delete_stale(
    client: &Client,
    previous: &[ResourceIdentifier],
    made: &[ResourceIdentifier],
) -> Result<()> {
    let key = |id: &ResourceIdentifier| (id.kind.clone(), id.namespace.clone(), id.name.clone());
    let kept: BTreeSet<_> = made.iter().map(key).collect();
    for id in previous.iter().filter(|id| !kept.contains(&key(id))) {
        let Some(kind) = Kind::of(&api_version(id), &id.kind) else {
            continue;
        };
        let api = dynamic(client, kind, &id.namespace);
        match api.delete(&id.name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(
                kind = id.kind,
                namespace = id.namespace,
                name = id.name,
                "deleted: no longer made"
            ),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::kube("delete stale object")(error)),
        }
    }
    Ok(())
}

/// The objects the annotation [`CONTAINED`] lists (none when absent or unreadable).
fn contained(app: &EdgeApplication) -> Vec<ResourceIdentifier> {
    app.annotations()
        .get(CONTAINED)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

fn api_version(id: &ResourceIdentifier) -> String {
    if id.group.is_empty() {
        id.version.clone()
    } else {
        format!("{}/{}", id.group, id.version)
    }
}

/// The dynamic API of `kind` in `namespace`.
fn dynamic(client: &Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    let (group, version, kind, plural) = kind.gvkr();
    let resource = ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn error_policy(app: Arc<EdgeApplication>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(app = app.name_any(), error = %error.reason(), "edgeapplication reconcile failed; retrying in 10 s");
    Action::requeue(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_to_the_event_limit() {
        let problem = Problem {
            ordinal: 3,
            reason: "é".repeat(2000),
        };
        let note = note(&problem);
        assert!(note.len() <= 1024 && note.starts_with("manifest 3: é") && note.ends_with("..."));
    }
}
