//! The fleet CRDs of `deploy/crds` (apps.kubeedge.io NodeGroup and EdgeApplication,
//! operations.kubeedge.io NodeUpgradeJob, ImagePrePullJob and ConfigUpdateJob) against
//! KubeEdge's own (issue 36): every field KubeEdge's v1.23 CRDs define exists in Verge's with
//! the same type, enum, requirement and Kubernetes extensions, in the same versions, scope,
//! names and subresources; and manifests written as KubeEdge's documentation writes them apply
//! under `kubectl apply --validate=strict`. KubeEdge's CRDs are read from its release source
//! (the Go module proxy, `verge_testkit::kubeedge_source`), never copied here.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, ensure};
use serde_json::Value;

/// Our CRD file and KubeEdge's, per CRD.
const PAIRS: [(&str, &str); 5] = [
    (
        "apps.kubeedge.io_nodegroups.yaml",
        "build/crds/apps/apps_v1alpha1_nodegroup.yaml",
    ),
    (
        "apps.kubeedge.io_edgeapplications.yaml",
        "build/crds/apps/apps_v1alpha1_edgeapplication.yaml",
    ),
    (
        "operations.kubeedge.io_nodeupgradejobs.yaml",
        "build/crds/operations/operations_v1alpha2_nodeupgradejob.yaml",
    ),
    (
        "operations.kubeedge.io_imageprepulljobs.yaml",
        "build/crds/operations/operations_v1alpha2_imageprepulljob.yaml",
    ),
    (
        "operations.kubeedge.io_configupdatejobs.yaml",
        "build/crds/operations/operations_v1alpha2_configupdatejob.yaml",
    ),
];

/// The schema keywords compared at every property path.
const KEYWORDS: [&str; 11] = [
    "type",
    "enum",
    "required",
    "format",
    "minimum",
    "default",
    "pattern",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
];

fn load(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every property path of `schema` (`.spec.nodes[]`, `.spec.matchLabels{}`) with its
/// [`KEYWORDS`] (sets sorted).
fn flatten(schema: &Value, path: String, out: &mut BTreeMap<String, BTreeMap<String, Value>>) {
    let mut keys = BTreeMap::new();
    for keyword in KEYWORDS {
        if let Some(value) = schema.get(keyword) {
            let mut value = value.clone();
            if let Some(list) = value.as_array_mut() {
                list.sort_by_key(ToString::to_string);
            }
            keys.insert(keyword.to_owned(), value);
        }
    }
    out.insert(path.clone(), keys);
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        flatten(property, format!("{path}.{name}"), out);
    }
    if schema.get("items").is_some() {
        flatten(&schema["items"], format!("{path}[]"), out);
    }
    if schema["additionalProperties"].is_object() {
        flatten(&schema["additionalProperties"], format!("{path}{{}}"), out);
    }
}

/// The differences of `ours` from `theirs` (nothing KubeEdge accepts may be refused).
fn differences(ours: &Value, theirs: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    let spec = |crd: &Value, key: &str| crd["spec"][key].clone();
    for key in ["group", "scope", "names"] {
        if spec(ours, key) != spec(theirs, key) {
            wrong.push(format!(
                "spec.{key}: ours {} theirs {}",
                spec(ours, key),
                spec(theirs, key)
            ));
        }
    }
    let versions = |crd: &Value| -> BTreeMap<String, Value> {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].as_str().unwrap_or_default().to_owned(), v.clone()))
            .collect()
    };
    let (ours_v, theirs_v) = (versions(ours), versions(theirs));
    if ours_v.keys().ne(theirs_v.keys()) {
        wrong.push(format!(
            "versions: ours {:?} theirs {:?}",
            ours_v.keys(),
            theirs_v.keys()
        ));
    }
    for (name, theirs) in &theirs_v {
        let Some(ours) = ours_v.get(name) else {
            continue;
        };
        for key in ["served", "storage", "subresources"] {
            if ours.get(key) != theirs.get(key) {
                wrong.push(format!(
                    "{name} {key}: ours {:?} theirs {:?}",
                    ours.get(key),
                    theirs.get(key)
                ));
            }
        }
        let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
        flatten(&ours["schema"]["openAPIV3Schema"], String::new(), &mut a);
        flatten(&theirs["schema"]["openAPIV3Schema"], String::new(), &mut b);
        for (path, keys) in &b {
            match a.get(path) {
                None => wrong.push(format!("{name} {path}: missing")),
                Some(ours) if ours != keys => {
                    wrong.push(format!("{name} {path}: ours {ours:?} theirs {keys:?}"));
                }
                Some(_) => {}
            }
        }
    }
    wrong
}

#[tokio::test]
async fn fleet_crds_accept_what_kubeedges_accept() -> anyhow::Result<()> {
    let kubeedge =
        tokio::task::spawn_blocking(verge_testkit::kubeedge_source::source_dir).await??;
    let ours = verge_testkit::crds::crds_dir();
    let mut wrong = Vec::new();
    for (our_file, their_file) in PAIRS {
        let diff = differences(
            &load(&ours.join(our_file))?,
            &load(&kubeedge.join(their_file))?,
        );
        wrong.extend(diff.into_iter().map(|d| format!("{our_file}: {d}")));
    }
    ensure!(
        wrong.is_empty(),
        "deploy/crds differs from KubeEdge {}:\n{}",
        verge_testkit::kubeedge_source::VERSION,
        wrong.join("\n")
    );
    Ok(())
}

/// A NodeGroup and an EdgeApplication as KubeEdge's documentation writes them (every
/// overrider kind, both target kinds).
const KUBEEDGE_STYLE: &str = r"
apiVersion: apps.kubeedge.io/v1alpha1
kind: NodeGroup
metadata:
  name: beijing
spec:
  nodes: [edge-node1, edge-node2]
  matchLabels:
    location: beijing
---
apiVersion: apps.kubeedge.io/v1alpha1
kind: EdgeApplication
metadata:
  name: nginx-app
  namespace: default
spec:
  workloadTemplate:
    manifests:
      - apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: nginx
        spec:
          replicas: 2
          selector:
            matchLabels: {app: nginx}
          template:
            metadata:
              labels: {app: nginx}
            spec:
              containers:
                - name: nginx
                  image: nginx:1.14.2
                  ports: [{containerPort: 80}]
      - apiVersion: v1
        kind: Service
        metadata:
          name: nginx-svc
        spec:
          selector: {app: nginx}
          ports: [{port: 80, targetPort: 80}]
  workloadScope:
    targetNodeGroups:
      - name: beijing
        overriders:
          replicas: 3
          imageOverriders:
            - component: Registry
              operator: replace
              value: registry.beijing.example
          envOverriders:
            - containerName: nginx
              operator: add
              value: [{name: REGION, value: beijing}]
          commandOverriders:
            - {containerName: nginx, operator: add, value: [nginx]}
          argsOverriders:
            - {containerName: nginx, operator: add, value: ['-g', 'daemon off;']}
          resourcesOverriders:
            - containerName: nginx
              value:
                limits: {cpu: 500m, memory: 256Mi}
    targetNodeLabels:
      - labelSelector:
          matchLabels: {location: shanghai}
        overriders:
          replicas: 1
";

/// `kubectl apply --dry-run=server --validate=strict` of `manifests`: whether it succeeded
/// and what kubectl printed (stdout, then stderr).
async fn apply_strict(
    cp: &verge_testkit::ControlPlane,
    manifests: String,
) -> anyhow::Result<(bool, String)> {
    let strict = ["apply", "--dry-run=server", "--validate=strict", "-f", "-"];
    let cp = cp.clone();
    let out =
        tokio::task::spawn_blocking(move || cp.kubectl_with_input(&strict, &manifests)).await??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

#[tokio::test]
async fn kubeedge_manifests_apply_with_strict_validation() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    verge_testkit::install_fleet_crds(&cp).await?;
    let (ok, text) = apply_strict(&cp, KUBEEDGE_STYLE.to_owned()).await?;
    ensure!(ok, "kubectl apply --validate=strict refused: {text}");
    for object in [
        "nodegroup.apps.kubeedge.io/beijing",
        "edgeapplication.apps.kubeedge.io/nginx-app",
    ] {
        ensure!(text.contains(object), "{object} not applied: {text}");
    }
    // A misspelt field (as KubeEdge's own proposal once wrote it) is refused, naming it.
    let misspelt = KUBEEDGE_STYLE.replace("envOverriders", "envOverrides");
    let (ok, text) = apply_strict(&cp, misspelt).await?;
    ensure!(
        !ok && text.contains("envOverrides"),
        "a misspelt field was not refused by name: {text}"
    );
    Ok(())
}

/// The operations jobs as KubeEdge's documentation writes them in v1alpha2 (every spec field).
const KUBEEDGE_JOBS: &str = r#"
apiVersion: operations.kubeedge.io/v1alpha2
kind: NodeUpgradeJob
metadata:
  name: upgrade-v2
spec:
  version: v1.23.0
  image: kubeedge/installation-package
  imageDigestGatter:
    amd64: sha256:0738039541234567890123456789012345678901234567890123456789012345
    registryAPI: {host: registry.example, token: t}
  nodeNames: [edge-node1]
  concurrency: 1
  timeoutSeconds: 300
  checkItems: [cpu, mem, disk]
  failureTolerate: "0.1"
  requireConfirmation: true
---
apiVersion: operations.kubeedge.io/v1alpha2
kind: ImagePrePullJob
metadata:
  name: prepull-v2
spec:
  imagePrePullTemplate:
    images: [nginx:1.27, busybox:1.36]
    labelSelector:
      matchExpressions: [{key: node-role.kubernetes.io/edge, operator: Exists}]
    checkItems: [disk]
    concurrency: 2
    failureTolerate: "0.3"
    timeoutSeconds: 120
    imageSecrets: default/registry-credentials
    retryTimes: 2
---
apiVersion: operations.kubeedge.io/v1alpha2
kind: ConfigUpdateJob
metadata:
  name: config-v2
spec:
  nodeNames: [edge-node1]
  concurrency: 1
  timeoutSeconds: 120
  failureTolerate: "0"
  updateFields:
    modules.edged.maxPods: "60"
"#;

/// KubeEdge's own samples (`build/crd-samples/operations`, v1alpha1) and the v1alpha2 jobs of
/// [`KUBEEDGE_JOBS`] apply under `kubectl apply --validate=strict`.
#[tokio::test]
async fn kubeedge_operations_jobs_apply_with_strict_validation() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    verge_testkit::install_fleet_crds(&cp).await?;
    let kubeedge =
        tokio::task::spawn_blocking(verge_testkit::kubeedge_source::source_dir).await??;
    let mut manifests = String::from(KUBEEDGE_JOBS);
    for sample in ["imageprepulljob.yaml", "nodeupgradejob.yaml"] {
        let path = kubeedge.join("build/crd-samples/operations").join(sample);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        manifests.push_str("\n---\n");
        manifests.push_str(&text);
    }
    let (ok, text) = apply_strict(&cp, manifests).await?;
    ensure!(ok, "kubectl apply --validate=strict refused: {text}");
    for object in [
        "nodeupgradejob.operations.kubeedge.io/upgrade-v2",
        "imageprepulljob.operations.kubeedge.io/prepull-v2",
        "configupdatejob.operations.kubeedge.io/config-v2",
        "imageprepulljob.operations.kubeedge.io/imageprepull-example",
        "nodeupgradejob.operations.kubeedge.io/upgrade-example",
    ] {
        ensure!(text.contains(object), "{object} not applied: {text}");
    }
    Ok(())
}
