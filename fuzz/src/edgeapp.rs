//! Target `edgeapp_json`: an EdgeApplication's `spec` as JSON (any shape; whoever may create
//! EdgeApplications in a namespace writes it) → fleetcontroller's rendering
//! (`verge_fleetcontroller::edgeapp::render`: manifest checks, per-target copies, overriders,
//! image references).
//!
//! Properties: nothing panics; every object made is a served kind in the EdgeApplication's own
//! namespace, owned by it, with a name; every problem names a manifest that exists.

use verge_fleetcontroller::api::EdgeApplication;
use verge_fleetcontroller::edgeapp::render::{Kind, render};

/// The namespace every rendered object must stay in.
const NAMESPACE: &str = "fuzz";

/// Parses `data` and checks the properties above.
pub fn check(data: &[u8]) {
    let Ok(spec) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let app = serde_json::json!({
        "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
        "metadata": {"name": "app", "namespace": NAMESPACE, "uid": "uid-1"},
        "spec": spec,
    });
    let Ok(app) = serde_json::from_value::<EdgeApplication>(app) else {
        return;
    };
    let manifests = app.spec.workload_template.manifests.len();
    let (desired, problems) = render(&app);
    for object in &desired {
        let meta = &object.object["metadata"];
        assert_eq!(meta["namespace"], NAMESPACE, "an object left the namespace");
        assert_eq!(meta["ownerReferences"][0]["uid"], "uid-1", "an object is not owned");
        assert!(meta["name"].as_str().is_some_and(|n| !n.is_empty()), "no name");
        let api_version = object.object["apiVersion"].as_str().unwrap_or_default();
        let kind = object.object["kind"].as_str().unwrap_or_default();
        assert_eq!(Kind::of(api_version, kind), Some(object.kind), "an unserved kind");
        assert!((object.id.ordinal as usize) < manifests);
    }
    for problem in &problems {
        assert!((problem.ordinal as usize) < manifests, "a problem names no manifest");
    }
}
