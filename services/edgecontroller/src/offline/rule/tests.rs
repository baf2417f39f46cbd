//! Unit tests of the toleration rule.

use serde_json::json;

use super::*;

fn pod(annotations: Value, tolerations: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "ns", "annotations": annotations },
        "spec": { "nodeName": "edge-1", "containers": [], "tolerations": tolerations },
    }))
    .expect("pod")
}

/// What the DefaultTolerationSeconds admission plugin adds, plus `extra`.
fn admitted(extra: Value) -> Value {
    let mut list = vec![
        json!({ "key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300 }),
        json!({ "key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300 }),
    ];
    if let Value::Array(extra) = extra {
        list.splice(0..0, extra);
    }
    Value::Array(list)
}

fn json_of(tolerations: Option<Vec<Toleration>>) -> Option<Value> {
    tolerations.map(|t| serde_json::to_value(t).expect("json"))
}

#[test]
fn admission_defaults_lose_their_seconds() {
    let extra = json!([{ "key": "dedicated", "operator": "Equal", "value": "edge",
        "effect": "NoSchedule" }]);
    let p = pod(json!({}), admitted(extra.clone()));
    let expected = json!([
        extra[0],
        { "key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute" },
        { "key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute" },
    ]);
    assert_eq!(json_of(kept_tolerations(&p)), Some(expected.clone()));
    // Applied once, nothing more to do (idempotent).
    let again = pod(json!({}), expected);
    assert_eq!(kept_tolerations(&again), None);
}

#[test]
fn opted_out_and_deleting_pods_are_left_alone() {
    let p = pod(json!({ EVICT_ON_UNREACHABLE: "true" }), admitted(json!([])));
    assert_eq!(kept_tolerations(&p), None);
    let p = pod(
        json!({ EVICT_ON_UNREACHABLE: "false" }),
        admitted(json!([])),
    );
    assert!(kept_tolerations(&p).is_some());
    let mut p = pod(json!({}), admitted(json!([])));
    p.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2024-01-01T00:00:00Z")).expect("time"));
    assert_eq!(kept_tolerations(&p), None);
}

#[test]
fn explicit_seconds_are_the_owners_choice() {
    let list = json!([
        { "key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 30 },
        { "key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300 },
    ]);
    let kept = json_of(kept_tolerations(&pod(json!({}), list.clone()))).expect("changed");
    assert_eq!(kept[0], list[0]);
    assert!(kept[1].get("tolerationSeconds").is_none(), "{kept}");
}

#[test]
fn missing_tolerations_are_added_and_wildcards_count() {
    let added = json_of(kept_tolerations(&pod(json!({}), json!(null)))).expect("changed");
    assert_eq!(
        added,
        json!([
            { "key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute" },
            { "key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute" },
        ])
    );
    // `operator: Exists` without key tolerates every taint forever.
    let all = pod(json!({}), json!([{ "operator": "Exists" }]));
    assert_eq!(kept_tolerations(&all), None);
    // Other effects do not count.
    let t: Toleration = serde_json::from_value(
        json!({ "key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoSchedule" }),
    )
    .expect("toleration");
    assert!(!tolerates(&t, UNREACHABLE_TAINT));
    let t: Toleration =
        serde_json::from_value(json!({ "key": UNREACHABLE_TAINT })).expect("toleration");
    assert!(tolerates(&t, UNREACHABLE_TAINT) && !tolerates(&t, NOT_READY_TAINT));
}

#[test]
fn patch_is_guarded_by_the_resource_version() {
    let p = patch("42", &[]);
    assert_eq!(p["metadata"]["resourceVersion"], "42");
    assert_eq!(p["spec"]["tolerations"], json!([]));
}

fn node(ready: &str, taints: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": "edge-1" },
        "spec": { "taints": taints },
        "status": { "conditions": [{ "type": "Ready", "status": ready }] },
    }))
    .expect("node")
}

#[test]
fn only_pods_of_an_unhealthy_node_need_their_tolerations_kept() {
    assert!(!node_needs_tolerations(&node("True", json!([]))));
    assert!(node_needs_tolerations(&node("Unknown", json!([]))));
    assert!(node_needs_tolerations(&node("False", json!([]))));
    let unreachable = json!([{ "key": UNREACHABLE_TAINT, "effect": "NoExecute" }]);
    assert!(node_needs_tolerations(&node("True", unreachable)));
    let other = json!([{ "key": "dedicated", "value": "edge", "effect": "NoSchedule" }]);
    assert!(!node_needs_tolerations(&node("True", other)));
    let no_status: Node =
        serde_json::from_value(json!({ "metadata": { "name": "n" } })).expect("node");
    assert!(node_needs_tolerations(&no_status));
}
