use super::*;
use crate::api::operations::{ConfigUpdateJob, ImagePrePullJob, NodeUpgradeJob};

fn upgrade_spec(yaml: &str) -> NodeUpgradeJobSpec {
    let job: NodeUpgradeJob = serde_norway::from_str(yaml).expect("a NodeUpgradeJob");
    job.spec
}

fn prepull_spec(yaml: &str) -> ImagePrePullJobSpec {
    let job: ImagePrePullJob = serde_norway::from_str(yaml).expect("an ImagePrePullJob");
    job.spec
}

fn config_spec(yaml: &str) -> ConfigUpdateJobSpec {
    let job: ConfigUpdateJob = serde_norway::from_str(yaml).expect("a ConfigUpdateJob");
    job.spec
}

const HEAD: &str = "apiVersion: operations.kubeedge.io/v1alpha2\nmetadata: {name: j}\n";

#[test]
fn kubeedges_upgrade_sample_parses_with_defaults() {
    let spec = upgrade_spec(&format!(
        "{HEAD}kind: NodeUpgradeJob\nspec:
  version: \"v1.16.0\"
  checkItems: [cpu, mem, disk]
  failureTolerate: \"0.3\"
  concurrency: 2
  timeoutSeconds: 180
  labelSelector:
    matchLabels: {{node-role.kubernetes.io/edge: \"\"}}\n"
    ));
    let up = upgrade(&spec).expect("valid");
    assert_eq!(up.version, semver::Version::new(1, 16, 0));
    assert_eq!(
        up.image.to_string(),
        "kubeedge/installation-package:v1.16.0"
    );
    assert_eq!(up.targets.concurrency, 2);
    assert_eq!(up.targets.timeout, Duration::from_secs(180));
    assert!((up.targets.failure_tolerate - 0.3).abs() < f64::EPSILON);
    assert_eq!(up.targets.checks.len(), 3);
    assert!(matches!(up.targets.selection, Selection::Labels(_)));
}

#[test]
fn the_version_replaces_the_images_tag_and_digests_are_checked() {
    let spec = upgrade_spec(&format!(
        "{HEAD}kind: NodeUpgradeJob\nspec:
  version: 2.0.1-rc.1
  image: 127.0.0.1:5000/verge/edgecore:old
  nodeNames: [edge-1]
  imageDigestGatter: {{amd64: \"sha256:{}\"}}\n",
        "ab".repeat(32)
    ));
    let up = upgrade(&spec).expect("valid");
    assert_eq!(
        up.image.to_string(),
        "127.0.0.1:5000/verge/edgecore:v2.0.1-rc.1"
    );
    assert_eq!(up.digests.len(), 1);
    assert_eq!(up.targets.timeout, DEFAULT_TIMEOUT);
    assert_eq!(up.targets.concurrency, 1);
}

/// Every field that could reach a node refuses shell syntax, naming the field
/// (CVE-2026-62371 built `keadm upgrade --version <version>` in a shell).
#[test]
fn shell_metacharacters_are_refused_by_field() {
    let cases = [
        (
            "version: \"v1.16.0; rm -rf /\"\n  nodeNames: [a]",
            "spec.version",
        ),
        ("version: \"$(reboot)\"\n  nodeNames: [a]", "spec.version"),
        (
            "version: v1.16.0\n  image: \"repo`id`\"\n  nodeNames: [a]",
            "spec.image",
        ),
        (
            "version: v1.16.0\n  image: \"repo && id\"\n  nodeNames: [a]",
            "spec.image",
        ),
        (
            "version: v1.16.0\n  nodeNames: [\"a;b\"]",
            "spec.nodeNames[0]",
        ),
        (
            "version: v1.16.0\n  nodeNames: [a]\n  imageDigestGatter: {amd64: \"sha256:$(x)\"}",
            "spec.imageDigestGatter.amd64",
        ),
    ];
    for (spec, field) in cases {
        let err = upgrade(&upgrade_spec(&format!(
            "{HEAD}kind: NodeUpgradeJob\nspec:\n  {spec}\n"
        )))
        .expect_err(spec);
        assert_eq!(err.field, field, "{spec}: {err}");
    }
    let err = prepull(&prepull_spec(&format!(
        "{HEAD}kind: ImagePrePullJob\nspec:\n  imagePrePullTemplate:\n    nodeNames: [a]\n    images: [busybox, \"busybox|sh\"]\n"
    )))
    .expect_err("pipe in an image");
    assert_eq!(err.field, "spec.imagePrePullTemplate.images[1]");
    let err = prepull(&prepull_spec(&format!(
        "{HEAD}kind: ImagePrePullJob\nspec:\n  imagePrePullTemplate:\n    nodeNames: [a]\n    images: [busybox]\n    imageSecrets: \"default/x;id\"\n"
    )))
    .expect_err("shell in a secret");
    assert_eq!(err.field, "spec.imagePrePullTemplate.imageSecrets");
    let err = config_update(&config_spec(&format!(
        "{HEAD}kind: ConfigUpdateJob\nspec:\n  nodeNames: [a]\n  updateFields: {{\"edged.maxPods;id\": \"1\"}}\n"
    )))
    .expect_err("shell in a path");
    assert_eq!(err.field, "spec.updateFields[\"edged.maxPods;id\"]");
    assert!(
        err.to_string()
            .starts_with("spec.updateFields[\"edged.maxPods;id\"]: ")
    );
}

#[test]
fn targets_need_exactly_one_selection_and_sane_knobs() {
    let base = |extra: &str| {
        format!(
            "{HEAD}kind: ConfigUpdateJob\nspec:\n  updateFields: {{edged.maxPods: \"60\"}}\n{extra}"
        )
    };
    for (extra, field) in [
        ("", "spec"),
        (
            "  nodeNames: [a]\n  labelSelector: {matchLabels: {x: y}}\n",
            "spec",
        ),
        (
            "  nodeNames: [a]\n  timeoutSeconds: -1\n",
            "spec.timeoutSeconds",
        ),
        ("  nodeNames: [a]\n  concurrency: -2\n", "spec.concurrency"),
        (
            "  nodeNames: [a]\n  failureTolerate: \"1.5\"\n",
            "spec.failureTolerate",
        ),
        (
            "  nodeNames: [a]\n  failureTolerate: \"ten\"\n",
            "spec.failureTolerate",
        ),
        (
            "  nodeNames: [a]\n  checkItems: [gpu]\n",
            "spec.checkItems[0]",
        ),
        (
            "  labelSelector: {matchExpressions: [{key: x, operator: Near}]}\n",
            "spec.labelSelector",
        ),
    ] {
        let err = config_update(&config_spec(&base(extra))).expect_err(extra);
        assert_eq!(err.field, field, "{extra}: {err}");
    }
    let ok = config_update(&config_spec(&base(
        "  nodeNames: [a, b, a]\n  timeoutSeconds: 0\n",
    )))
    .expect("valid");
    assert!(matches!(&ok.targets.selection, Selection::Names(n) if n.len() == 2));
    assert_eq!(ok.targets.timeout, DEFAULT_TIMEOUT);
    assert_eq!(
        ok.fields.keys().next().map(|k| k.join(".")),
        Some("edged.maxPods".to_owned())
    );
}

#[test]
fn prepull_lists_images_once_and_reads_its_secret_and_retries() {
    let spec = prepull_spec(&format!(
        "{HEAD}kind: ImagePrePullJob\nspec:
  imagePrePullTemplate:
    images: [busybox:latest, registry.local:5000/app@sha256:{d}, busybox:latest]
    nodeNames: [edge-1]
    imageSecrets: kube-system/registry-creds
    retryTimes: 2\n",
        d = "0".repeat(64)
    ));
    let p = prepull(&spec).expect("valid");
    assert_eq!(p.images.len(), 2);
    assert_eq!(
        p.secret,
        Some(("kube-system".into(), "registry-creds".into()))
    );
    assert_eq!(p.retries, 2);
    let none = prepull_spec(&format!(
        "{HEAD}kind: ImagePrePullJob\nspec:\n  imagePrePullTemplate:\n    nodeNames: [a]\n"
    ));
    assert_eq!(
        prepull(&none).expect_err("no images").field,
        "spec.imagePrePullTemplate.images"
    );
}

#[test]
fn config_values_are_bounded() {
    let long = "9".repeat(MAX_VALUE_LEN + 1);
    let spec = config_spec(&format!(
        "{HEAD}kind: ConfigUpdateJob\nspec:\n  nodeNames: [a]\n  updateFields: {{edged.maxPods: \"{long}\"}}\n"
    ));
    assert!(config_update(&spec).is_err());
    let spec = config_spec(&format!(
        "{HEAD}kind: ConfigUpdateJob\nspec:\n  nodeNames: [a]\n  updateFields: {{\"a..b\": \"1\"}}\n"
    ));
    assert!(config_update(&spec).is_err());
}
