//! No eviction of edge pods on a lost link, decided by the API server at a pod's creation
//! (docs/offline.md): the MutatingAdmissionPolicy `verge-edge-offline-tolerations`
//! (deploy/cloud/access/offline-tolerations.yaml) makes a pod that asks for edge nodes
//! tolerate the `unreachable` and `not-ready` NoExecute taints without time limit, keeps an
//! owner's own `tolerationSeconds` and the opt-out annotation, and leaves every other pod as
//! Kubernetes' `DefaultTolerationSeconds` made it (300 s). Before this policy edgecontroller
//! needed `patch` on every pod to do this (issue 31); now it has none.
//!
//! The pods carry a scheduling gate, so none is ever scheduled (no node, no kubelet needed);
//! the one bound by `nodeName` names a node that does not exist.

use std::collections::BTreeMap;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// A gated pod with `spec` merged in and `annotations`.
fn pod(name: &str, annotations: Value, spec: Value) -> anyhow::Result<Pod> {
    let mut object = json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "schedulingGates": [{ "name": "verge.io/test" }],
            "containers": [{ "name": "c", "image": "busybox" }],
        },
    });
    if let (Some(base), Value::Object(extra)) = (object["spec"].as_object_mut(), spec) {
        // A bound pod may not carry scheduling gates.
        if extra.contains_key("nodeName") {
            base.remove("schedulingGates");
        }
        base.extend(extra);
    }
    Ok(serde_json::from_value(object)?)
}

/// `tolerationSeconds` of each NoExecute toleration by key ("*" for an `Exists` without
/// key); `None` = forever.
fn seconds(pod: &Pod) -> BTreeMap<String, Option<i64>> {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone());
    tolerations
        .unwrap_or_default()
        .into_iter()
        .filter(|t| matches!(t.effect.as_deref(), None | Some("") | Some("NoExecute")))
        .map(|t| (t.key.unwrap_or_else(|| "*".into()), t.toleration_seconds))
        .collect()
}

fn expect(pairs: &[(&str, Option<i64>)]) -> BTreeMap<String, Option<i64>> {
    pairs.iter().map(|(k, s)| ((*k).to_owned(), *s)).collect()
}

#[tokio::test]
async fn pods_that_ask_for_edge_nodes_tolerate_a_lost_link_from_creation() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    let admin = cp.client().await?;
    verge_testkit::install_cloud_rbac(&cp).await?;
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let ns = format!("offline-tol-{suffix}");
    verge_e2e::create_namespace(&admin, &ns).await?;
    let result = cases(&admin, &ns).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn cases(admin: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let edge = verge_core::EDGE_NODE_LABEL;
    let selector = json!({ "nodeSelector": { edge: "" } });
    let affinity = |terms: Value| {
        json!({ "affinity": { "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms } } } })
    };
    let forever = [(NOT_READY, None), (UNREACHABLE, None)];
    let defaults = [(NOT_READY, Some(300)), (UNREACHABLE, Some(300))];
    let cases = [
        // Asks for edge nodes by nodeSelector, or by a required affinity term.
        ("selector", json!({}), selector.clone(), expect(&forever)),
        (
            "affinity",
            json!({}),
            affinity(json!([{ "matchExpressions": [{ "key": edge, "operator": "Exists" }] }])),
            expect(&forever),
        ),
        // nodeName and an edge selector (how the e2e suites bind pods).
        (
            "bound",
            json!({}),
            json!({ "nodeSelector": { edge: "" }, "nodeName": "no-such-node" }),
            expect(&forever),
        ),
        // May run anywhere: Kubernetes' defaults.
        ("anywhere", json!({}), json!({}), expect(&defaults)),
        (
            "either",
            json!({}),
            affinity(json!([
                { "matchExpressions": [{ "key": edge, "operator": "Exists" }] },
                { "matchExpressions": [{ "key": "zone", "operator": "In", "values": ["a"] }] },
            ])),
            expect(&defaults),
        ),
        // Opted out.
        (
            "opted-out",
            json!({ "verge.io/evict-on-unreachable": "true" }),
            selector.clone(),
            expect(&defaults),
        ),
        // The owner's own seconds stay; the other taint is still kept forever.
        (
            "owner",
            json!({}),
            json!({ "nodeSelector": { edge: "" }, "tolerations": [
                { "key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60 },
                { "key": "example.com/other", "operator": "Equal", "value": "v", "effect": "NoSchedule" },
            ] }),
            expect(&[(NOT_READY, None), (UNREACHABLE, Some(60))]),
        ),
        // Tolerates every taint already: nothing to add.
        (
            "everything",
            json!({}),
            json!({ "nodeSelector": { edge: "" }, "tolerations": [{ "operator": "Exists" }] }),
            expect(&[("*", None)]),
        ),
    ];
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let mut wrong = Vec::new();
    for (name, annotations, spec, want) in cases {
        let created = pods
            .create(&PostParams::default(), &pod(name, annotations, spec)?)
            .await?;
        let got = seconds(&created);
        if got != want {
            wrong.push(format!("{name}: {got:?}, expected {want:?}"));
        }
        if created.metadata.generation != Some(1) {
            wrong.push(format!(
                "{name}: generation {:?}",
                created.metadata.generation
            ));
        }
        // Tolerations other than the two taints' are kept as they were.
        if name == "owner" {
            let spec = created.spec.unwrap_or_default();
            let other = spec.tolerations.unwrap_or_default().into_iter().any(|t| {
                t.key.as_deref() == Some("example.com/other") && t.value.as_deref() == Some("v")
            });
            if !other {
                wrong.push("owner: lost its other toleration".into());
            }
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}
