//! Unit tests of service list authorization and selection.

use serde_json::json;

use super::*;

fn pod(ns: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": ns },
        "spec": { "nodeName": node, "containers": [] },
    }))
    .expect("pod")
}

fn service(ns: &str, name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "uid": format!("u-{name}"),
            "resourceVersion": "7", "annotations": { "big": "x".repeat(100) },
            "labels": { "app": name } },
        "spec": { "type": "ClusterIP", "clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"],
            "selector": { "app": name },
            "ports": [{ "name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080 }] },
        "status": { "loadBalancer": {} },
    }))
    .expect("service")
}

#[test]
fn a_node_lists_only_namespaces_of_its_pods() {
    let pods = [pod("apps", "edge-1"), pod("other", "edge-2")];
    assert_eq!(authorize("edge-1", "apps", &pods).expect("own"), Scope::All);
    let refused = authorize("edge-1", "other", &pods).expect_err("another node's namespace");
    assert!(matches!(refused, Error::NotInNamespace { .. }), "{refused}");
    assert_eq!(
        refused.to_string(),
        "forbidden: node \"edge-1\" has no pod in namespace \"other\", so may not list its services"
    );
    assert!(authorize("edge-1", "empty", &pods).is_err());
    // `default` without a pod there: the master service only; with one: everything.
    assert_eq!(
        authorize("edge-1", "default", &pods).expect("master"),
        Scope::MasterOnly
    );
    let pods = [pod("default", "edge-1")];
    assert_eq!(
        authorize("edge-1", "default", &pods).expect("all"),
        Scope::All
    );
}

#[test]
fn selection_is_by_namespace_and_scope_sorted_and_trimmed() {
    let services = [
        service("default", "zeta"),
        service("default", "kubernetes"),
        service("apps", "web"),
        service("apps", "api"),
    ];
    let names = |v: &[Service]| {
        v.iter()
            .map(|s| s.metadata.name.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&select(Scope::All, "apps", &services)),
        ["api", "web"]
    );
    assert_eq!(
        names(&select(Scope::All, "default", &services)),
        ["kubernetes", "zeta"]
    );
    assert_eq!(
        names(&select(Scope::MasterOnly, "default", &services)),
        ["kubernetes"]
    );
    assert!(select(Scope::MasterOnly, "apps", &services).is_empty());

    let trimmed = &select(Scope::All, "apps", &services)[0];
    assert_eq!(
        serde_json::to_value(trimmed).expect("json"),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "api", "namespace": "apps", "uid": "u-api",
                "resourceVersion": "7" },
            "spec": { "type": "ClusterIP", "clusterIP": "10.0.0.9",
                "clusterIPs": ["10.0.0.9"],
                "ports": [{ "name": "http", "port": 80, "protocol": "TCP",
                    "targetPort": 8080 }] },
        })
    );
}
