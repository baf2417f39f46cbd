use kube::api::ObjectMeta;

use super::*;
use crate::api::edgeapp::EdgeApplicationSpec;

fn app(spec_yaml: &str) -> EdgeApplication {
    let spec: EdgeApplicationSpec = serde_norway::from_str(spec_yaml).expect("valid YAML");
    let mut app = EdgeApplication::new("shop", spec);
    app.metadata = ObjectMeta {
        name: Some("shop".to_owned()),
        namespace: Some("retail".to_owned()),
        uid: Some("u-1".to_owned()),
        ..ObjectMeta::default()
    };
    app
}

const SPEC: &str = "
workloadTemplate:
  manifests:
  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, resourceVersion: '9'},
     spec: {replicas: 1, selector: {matchLabels: {app: web}},
            template: {metadata: {labels: {app: web}},
                       spec: {nodeSelector: {old: x}, containers: [{name: web, image: 'web:1'}]}}}}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: settings, namespace: retail}, data: {a: b}}
workloadScope:
  targetNodeGroups:
  - {name: north, overriders: {replicas: 2, imageOverriders: [{component: Tag, operator: replace, value: '2'}]}}
  - {name: south}
  targetNodeLabels:
  - {labelSelector: {matchLabels: {site: lab}}}
";

#[test]
fn deployments_are_made_per_target_and_the_rest_once() {
    let (desired, problems) = render(&app(SPEC));
    assert_eq!(problems, []);
    let names: Vec<_> = desired
        .iter()
        .map(|d| (d.id.ordinal, d.id.kind.as_str(), d.id.name.as_str()))
        .collect();
    let hash = label_hash(&BTreeMap::from([("site".to_owned(), "lab".to_owned())]));
    assert_eq!(
        names,
        [
            (0, "Deployment", "web-north"),
            (0, "Deployment", "web-south"),
            (0, "Deployment", &*format!("web-ls-{hash}")),
            (1, "Service", "web"),
            (2, "ConfigMap", "settings"),
        ]
    );
    let north = &desired[0].object;
    assert_eq!(north["spec"]["replicas"], 2);
    assert_eq!(
        north["spec"]["template"]["spec"]["containers"][0]["image"],
        "web:2"
    );
    assert_eq!(
        north["spec"]["template"]["spec"]["nodeSelector"],
        json!({BELONGING_TO: "north"})
    );
    assert_eq!(north["metadata"]["namespace"], "retail");
    assert_eq!(north["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(north["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(north["metadata"].get("resourceVersion").is_none());
    let south = &desired[1].object;
    assert_eq!(south["spec"]["replicas"], 1);
    assert_eq!(
        south["spec"]["template"]["spec"]["containers"][0]["image"],
        "web:1"
    );
    let labelled = &desired[2].object["spec"]["template"]["spec"];
    assert_eq!(
        labelled["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"],
        json!([{"key": "site", "operator": "In", "values": ["lab"]}])
    );
    assert_eq!(
        desired[3].object["metadata"]["annotations"][SERVICE_TOPOLOGY],
        RANGE_NODEGROUP
    );
}

#[test]
fn foreign_namespaces_unserved_kinds_and_bad_overriders_are_problems() {
    let (desired, problems) = render(&app("
workloadTemplate:
  manifests:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: kube-system}}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: admin2}}
  - {apiVersion: v1, kind: Secret, metadata: {}}
  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web},
     spec: {template: {spec: {containers: [{name: web, image: 'web:1'}]}}}}
workloadScope:
  targetNodeGroups:
  - {name: a, overriders: {argsOverriders: [{containerName: other, operator: add, value: [x]}]}}
  - {name: b}
"));
    let ordinals: Vec<_> = problems.iter().map(|p| p.ordinal).collect();
    assert_eq!(ordinals, [0, 1, 2, 3], "{problems:?}");
    assert!(problems[0].reason.contains("kube-system"));
    assert!(problems[3].reason.contains("\"other\""));
    // The other group's copy is still made.
    assert_eq!(desired.len(), 1);
    assert_eq!(desired[0].id.name, "web-b");
}

#[test]
fn an_app_not_from_the_api_server_renders_nothing() {
    let mut app = app(SPEC);
    app.metadata.uid = None;
    assert_eq!(render(&app), (vec![], vec![]));
}
