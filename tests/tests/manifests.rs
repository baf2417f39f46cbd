//! `deploy/cloud` on the real control plane: the RBAC of `deploy/cloud/access` applied for
//! real and checked with `kubectl auth can-i --as=system:serviceaccount:verge-system:<sa>`
//! against a table of what each service's code calls (and representative things it must not
//! be able to do), then `kubectl apply --dry-run=server -k deploy/cloud`.
//!
//! The control plane is shared with other tests: applying the same objects is idempotent.

use std::path::PathBuf;
use std::process::Output;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::Api;
use kube::api::PostParams;
use verge_testkit::ControlPlane;

/// The repository's `deploy/cloud`.
fn cloud_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cloud")
}

/// `kubectl <args>` on `cp`, failing with its output unless it succeeds.
async fn kubectl(cp: &ControlPlane, args: Vec<String>) -> anyhow::Result<String> {
    let output = run_kubectl(cp, args.clone()).await?;
    if !output.status.success() {
        bail!(
            "kubectl {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

async fn run_kubectl(cp: &ControlPlane, args: Vec<String>) -> anyhow::Result<Output> {
    let mut cmd = cp.kubectl_command();
    cmd.args(&args);
    tokio::task::spawn_blocking(move || cmd.output())
        .await?
        .context("running kubectl")
}

/// One `kubectl auth can-i` question and its expected answer.
#[derive(Debug, Clone, Copy)]
struct Can {
    /// Service account in verge-system.
    sa: &'static str,
    verb: &'static str,
    /// `resource[.group][/name][#subresource]`.
    what: &'static str,
    /// `cluster` (cluster-scoped resource), `*` (every namespace) or a namespace.
    scope: &'static str,
    allowed: bool,
}

const fn yes(sa: &'static str, verb: &'static str, what: &'static str, scope: &'static str) -> Can {
    Can {
        sa,
        verb,
        what,
        scope,
        allowed: true,
    }
}

const fn no(sa: &'static str, verb: &'static str, what: &'static str, scope: &'static str) -> Can {
    Can {
        sa,
        verb,
        what,
        scope,
        allowed: false,
    }
}

const CH: &str = "cloudhub";
const EC: &str = "edgecontroller";
const DC: &str = "devicecontroller";
const FC: &str = "fleetcontroller";
const NGS: &str = "nodegroups.apps.kubeedge.io";
const EAPPS: &str = "edgeapplications.apps.kubeedge.io";
const VS: &str = "verge-system";
const CSR: &str = "certificatesigningrequests.certificates.k8s.io";
const LEASES: &str = "leases.coordination.k8s.io";
const SLICES: &str = "endpointslices.discovery.k8s.io";
const CTBS: &str = "clustertrustbundles.certificates.k8s.io";
const PCRS: &str = "podcertificaterequests.certificates.k8s.io";

/// What each service's code calls (services/*/src, crates/controller; the comments in
/// deploy/cloud/access/rbac.yaml name the call sites).
const NEEDED: &[Can] = &[
    // cloudhub: joins and renewals through the CSR API, TokenReviews, the CA.
    yes(CH, "get", "nodes", "cluster"),
    yes(CH, "create", "nodes", "cluster"),
    yes(CH, "list", "nodes", "cluster"),
    yes(CH, "watch", "nodes", "cluster"),
    yes(CH, "create", CSR, "cluster"),
    yes(
        CH,
        "patch",
        "certificatesigningrequests.certificates.k8s.io#approval",
        "cluster",
    ),
    yes(
        CH,
        "patch",
        "certificatesigningrequests.certificates.k8s.io#status",
        "cluster",
    ),
    yes(
        CH,
        "approve",
        "signers.certificates.k8s.io/verge.io/edge-node",
        "cluster",
    ),
    yes(
        CH,
        "sign",
        "signers.certificates.k8s.io/verge.io/edge-node",
        "cluster",
    ),
    yes(
        CH,
        "create",
        "tokenreviews.authentication.k8s.io",
        "cluster",
    ),
    yes(CH, "get", "namespaces/verge-system", "cluster"),
    yes(CH, "get", "secrets/verge-ca", VS),
    yes(CH, "create", "secrets", VS),
    yes(CH, "create", "configmaps/verge-ca", VS),
    yes(CH, "patch", "configmaps/verge-ca", VS),
    // No Secret of kube-system (issue 31): a join's token is checked with a TokenReview, and
    // Join.GetCa (keyed with the token's secret) is opt-in, its Role in deploy/cloud/optional.
    no(CH, "get", "secrets/bootstrap-token-abcdef", "kube-system"),
    no(CH, "get", "secrets", "kube-system"),
    // cloudhub streams: kubelet serving CSRs, the replicas' peer Leases.
    yes(
        CH,
        "approve",
        "signers.certificates.k8s.io/kubernetes.io/kubelet-serving",
        "cluster",
    ),
    yes(CH, "get", CSR, "cluster"),
    yes(CH, "create", LEASES, VS),
    yes(CH, "patch", LEASES, VS),
    yes(CH, "list", LEASES, VS),
    yes(CH, "delete", LEASES, VS),
    // cloudhub Service dials: which addresses are ready endpoints (read only).
    yes(CH, "list", SLICES, "*"),
    yes(CH, "watch", SLICES, "*"),
    no(CH, "create", SLICES, "*"),
    no(CH, "get", "services", "*"),
    // cloudhub: an edge API serving CSR may name the kubernetes Service's cluster IPs.
    yes(CH, "get", "services/kubernetes", "default"),
    no(CH, "get", "services/other", "default"),
    no(CH, "list", "services", "default"),
    // edgecontroller, as itself: the edge Nodes and bound pods (one watch each), Services,
    // its own Lease and hubs; no pod patch (offline tolerations come from admission).
    yes(EC, "list", "nodes", "cluster"),
    yes(EC, "watch", "nodes", "cluster"),
    yes(EC, "list", "pods", "*"),
    yes(EC, "watch", "pods", "*"),
    no(EC, "patch", "pods", "default"),
    no(EC, "update", "pods", "default"),
    yes(EC, "list", "services", "*"),
    yes(EC, "watch", "services", "*"),
    yes(EC, "list", SLICES, "*"),
    yes(EC, "watch", SLICES, "*"),
    // edgecontroller, as a node (constrained impersonation): what a kubelet asks, which the
    // Node authorizer and NodeRestriction then bound.
    yes(
        EC,
        "impersonate:arbitrary-node",
        "nodes.authentication.k8s.io",
        "cluster",
    ),
    yes(EC, "impersonate-on:arbitrary-node:get", "nodes", "cluster"),
    yes(
        EC,
        "impersonate-on:arbitrary-node:patch",
        "nodes#status",
        "cluster",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:get",
        "secrets",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:watch",
        "configmaps",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:create",
        "serviceaccounts#token",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:patch",
        "pods#status",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:delete",
        "pods",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:create",
        "events",
        "default",
    ),
    yes(
        EC,
        "impersonate-on:arbitrary-node:patch",
        LEASES,
        "kube-node-lease",
    ),
    yes(EC, "impersonate-on:arbitrary-node:get", CTBS, "cluster"),
    yes(EC, "impersonate-on:arbitrary-node:list", CTBS, "cluster"),
    yes(EC, "impersonate-on:arbitrary-node:create", PCRS, "default"),
    yes(EC, "impersonate-on:arbitrary-node:get", PCRS, "default"),
    yes(
        EC,
        "impersonate-on:arbitrary-node:get",
        "serviceaccounts",
        "default",
    ),
    // ... and nothing of that in its own name (issue 31: a compromise of edgecontroller does
    // not read Secrets or mint tokens for service accounts no edge pod runs as).
    no(EC, "list", "secrets", "*"),
    no(EC, "get", "secrets", "kube-system"),
    no(EC, "watch", "secrets", "default"),
    no(EC, "list", "configmaps", "*"),
    no(EC, "create", "serviceaccounts#token", "kube-system"),
    no(EC, "create", "serviceaccounts#token", "default"),
    no(EC, "get", "pods", "default"),
    no(EC, "delete", "pods", "default"),
    no(EC, "patch", "pods#status", "default"),
    no(EC, "create", "nodes", "cluster"),
    no(EC, "patch", "nodes", "cluster"),
    no(EC, "patch", "nodes#status", "cluster"),
    no(EC, "create", "events", "default"),
    no(EC, "patch", LEASES, "kube-node-lease"),
    // (Reading ClusterTrustBundles as itself is not checked: Kubernetes lets every service
    // account do so, `system:cluster-trust-bundle-discovery`.)
    no(EC, "create", PCRS, "default"),
    no(EC, "get", "serviceaccounts", "default"),
    // ... nor as anyone but a node.
    no(EC, "impersonate", "users", "cluster"),
    no(EC, "impersonate", "groups", "cluster"),
    no(
        EC,
        "impersonate:user-info",
        "users.authentication.k8s.io",
        "cluster",
    ),
    no(
        EC,
        "impersonate:serviceaccount",
        "serviceaccounts",
        "kube-system",
    ),
    yes(EC, "get", "configmaps/verge-ca", VS),
    yes(EC, "get", "leases.coordination.k8s.io/edgecontroller", VS),
    yes(
        EC,
        "update",
        "leases.coordination.k8s.io/edgecontroller",
        VS,
    ),
    yes(EC, "create", LEASES, VS),
    yes(EC, "list", SLICES, VS),
    yes(EC, "watch", SLICES, VS),
    // devicecontroller: the device API, its events, edge Nodes, its own Lease and hubs.
    yes(DC, "list", "devices.devices.kubeedge.io", "*"),
    yes(DC, "watch", "devices.devices.kubeedge.io", "*"),
    yes(DC, "get", "devices.devices.kubeedge.io", "default"),
    yes(DC, "list", "devicemodels.devices.kubeedge.io", "*"),
    yes(DC, "watch", "devicemodels.devices.kubeedge.io", "*"),
    yes(
        DC,
        "create",
        "devicestatuses.devices.kubeedge.io",
        "default",
    ),
    yes(DC, "patch", "devicestatuses.devices.kubeedge.io", "default"),
    yes(DC, "create", "events.events.k8s.io", "default"),
    yes(DC, "list", "nodes", "cluster"),
    yes(DC, "watch", "nodes", "cluster"),
    yes(DC, "get", "configmaps/verge-ca", VS),
    yes(DC, "get", "leases.coordination.k8s.io/devicecontroller", VS),
    yes(
        DC,
        "update",
        "leases.coordination.k8s.io/devicecontroller",
        VS,
    ),
    yes(DC, "create", LEASES, VS),
    yes(DC, "list", SLICES, VS),
    yes(DC, "watch", SLICES, VS),
    // fleetcontroller: NodeGroups and their members' labels, EdgeApplications and the kinds
    // they hold, its events and its own Lease.
    yes(FC, "list", NGS, "cluster"),
    yes(FC, "watch", NGS, "cluster"),
    yes(FC, "patch", NGS, "cluster"),
    yes(FC, "patch", "nodegroups.apps.kubeedge.io#status", "cluster"),
    yes(FC, "list", "nodes", "cluster"),
    yes(FC, "watch", "nodes", "cluster"),
    yes(FC, "patch", "nodes", "cluster"),
    yes(FC, "list", "pods", "*"),
    yes(FC, "delete", "pods", "default"),
    yes(FC, "list", EAPPS, "*"),
    yes(FC, "watch", EAPPS, "*"),
    yes(FC, "patch", EAPPS, "default"),
    yes(
        FC,
        "patch",
        "edgeapplications.apps.kubeedge.io#status",
        "default",
    ),
    yes(FC, "list", "deployments.apps", "*"),
    yes(FC, "watch", "deployments.apps", "*"),
    yes(FC, "create", "deployments.apps", "default"),
    yes(FC, "patch", "deployments.apps", "default"),
    yes(FC, "delete", "deployments.apps", "default"),
    yes(FC, "create", "services", "default"),
    yes(FC, "patch", "services", "default"),
    yes(FC, "delete", "services", "default"),
    yes(FC, "create", "configmaps", "default"),
    yes(FC, "patch", "configmaps", "default"),
    yes(FC, "delete", "configmaps", "default"),
    yes(FC, "create", "secrets", "default"),
    yes(FC, "patch", "secrets", "default"),
    yes(FC, "delete", "secrets", "default"),
    yes(FC, "create", "events.events.k8s.io", "default"),
    yes(FC, "patch", "events.events.k8s.io", "default"),
    yes(
        FC,
        "list",
        "nodeupgradejobs.operations.kubeedge.io",
        "cluster",
    ),
    yes(
        FC,
        "watch",
        "imageprepulljobs.operations.kubeedge.io",
        "cluster",
    ),
    yes(
        FC,
        "patch",
        "configupdatejobs.operations.kubeedge.io#status",
        "cluster",
    ),
    yes(FC, "get", "secrets", "default"),
    yes(FC, "get", "configmaps/verge-ca", VS),
    yes(FC, "list", SLICES, VS),
    yes(FC, "watch", SLICES, VS),
    yes(FC, "get", "leases.coordination.k8s.io/fleetcontroller", VS),
    yes(
        FC,
        "update",
        "leases.coordination.k8s.io/fleetcontroller",
        VS,
    ),
    yes(FC, "create", LEASES, VS),
];

/// Representative things a service must not be able to do.
const FORBIDDEN: &[Can] = &[
    // cloudhub reads Secrets only by name: the CA (none in kube-system, above).
    no(CH, "list", "secrets", "*"),
    no(CH, "list", "secrets", "kube-system"),
    no(CH, "watch", "secrets", "kube-system"),
    no(CH, "get", "secrets/app-secret", "default"),
    no(CH, "get", "secrets/other", VS),
    no(CH, "patch", "configmaps/other", VS),
    no(CH, "update", "nodes", "cluster"),
    no(CH, "patch", "nodes", "cluster"),
    no(CH, "delete", "nodes", "cluster"),
    no(
        CH,
        "approve",
        "signers.certificates.k8s.io/kubernetes.io/kube-apiserver-client",
        "cluster",
    ),
    no(
        CH,
        "sign",
        "signers.certificates.k8s.io/kubernetes.io/kubelet-serving",
        "cluster",
    ),
    no(CH, "delete", CSR, "cluster"),
    no(CH, "list", CSR, "cluster"),
    no(
        CH,
        "sign",
        "signers.certificates.k8s.io/kubernetes.io/kubelet-serving",
        "cluster",
    ),
    no(CH, "list", LEASES, "default"),
    no(CH, "create", "namespaces", "cluster"),
    no(CH, "get", "pods", "default"),
    no(CH, "create", "serviceaccounts#token", VS),
    // The controllers cannot delete or replace Nodes, nor run pods.
    no(EC, "delete", "nodes", "cluster"),
    no(EC, "update", "nodes", "cluster"),
    no(EC, "create", "pods", "default"),
    no(EC, "update", "pods", "default"),
    no(EC, "create", "secrets", "default"),
    no(EC, "delete", "secrets", "default"),
    no(EC, "update", "configmaps", "default"),
    no(EC, "create", "services", "default"),
    no(EC, "update", LEASES, "kube-system"),
    no(
        EC,
        "update",
        "leases.coordination.k8s.io/devicecontroller",
        VS,
    ),
    no(EC, "create", SLICES, "*"),
    no(DC, "delete", "nodes", "cluster"),
    no(DC, "patch", "nodes", "cluster"),
    no(DC, "create", "pods", "default"),
    // devicecontroller reads no Secrets and mints no tokens.
    no(DC, "get", "secrets", VS),
    no(DC, "get", "secrets/verge-ca", VS),
    no(DC, "list", "secrets", "*"),
    no(DC, "create", "serviceaccounts#token", VS),
    no(DC, "delete", "devices.devices.kubeedge.io", "default"),
    no(DC, "update", "devices.devices.kubeedge.io", "default"),
    no(
        DC,
        "update",
        "leases.coordination.k8s.io/edgecontroller",
        VS,
    ),
    // fleetcontroller reads Secrets only by name (a pre-pull's), runs no pod itself, holds
    // only the kinds an EdgeApplication may hold, and requests no tokens.
    no(FC, "list", "secrets", "*"),
    no(FC, "watch", "secrets", "*"),
    no(FC, "get", "configmaps", "default"),
    no(FC, "create", "pods", "default"),
    no(FC, "update", "nodes", "cluster"),
    no(FC, "delete", "nodes", "cluster"),
    no(FC, "create", "daemonsets.apps", "default"),
    no(FC, "create", "roles.rbac.authorization.k8s.io", "default"),
    no(FC, "delete", EAPPS, "default"),
    no(FC, "delete", NGS, "cluster"),
    // The jobs are people's: fleetcontroller writes only their status.
    no(
        FC,
        "patch",
        "nodeupgradejobs.operations.kubeedge.io",
        "cluster",
    ),
    no(
        FC,
        "delete",
        "imageprepulljobs.operations.kubeedge.io",
        "cluster",
    ),
    no(FC, "create", "serviceaccounts#token", VS),
    no(
        FC,
        "update",
        "leases.coordination.k8s.io/edgecontroller",
        VS,
    ),
    // Nobody escalates: no RBAC writes, no binding or escalating roles, no impersonation.
    no(
        CH,
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(
        CH,
        "bind",
        "clusterroles.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(CH, "create", "rolebindings.rbac.authorization.k8s.io", VS),
    no(CH, "impersonate", "users", "cluster"),
    no(CH, "*", "*", "*"),
    no(EC, "escalate", "roles.rbac.authorization.k8s.io", VS),
    no(
        EC,
        "create",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(
        EC,
        "bind",
        "clusterroles.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(EC, "impersonate", "serviceaccounts", "*"),
    no(EC, "*", "*", "*"),
    no(
        DC,
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(DC, "update", "roles.rbac.authorization.k8s.io", VS),
    no(DC, "bind", "roles.rbac.authorization.k8s.io", VS),
    no(DC, "impersonate", "groups", "cluster"),
    no(DC, "*", "*", "*"),
    no(FC, "escalate", "roles.rbac.authorization.k8s.io", "default"),
    no(
        FC,
        "bind",
        "clusterroles.rbac.authorization.k8s.io",
        "cluster",
    ),
    no(FC, "impersonate", "users", "cluster"),
    no(FC, "*", "*", "*"),
];

/// The `kubectl auth can-i` arguments of `can`.
fn can_i_args(can: &Can) -> Vec<String> {
    let (what, sub) = match can.what.split_once('#') {
        Some((what, sub)) => (what, Some(sub)),
        None => (can.what, None),
    };
    let mut args = vec![
        "auth".to_owned(),
        "can-i".to_owned(),
        can.verb.to_owned(),
        what.to_owned(),
        format!("--as=system:serviceaccount:verge-system:{}", can.sa),
    ];
    if let Some(sub) = sub {
        args.push(format!("--subresource={sub}"));
    }
    match can.scope {
        "cluster" => {}
        "*" => args.push("--all-namespaces".to_owned()),
        namespace => args.push(format!("--namespace={namespace}")),
    }
    args
}

/// Whether the API server allows `can` (kubectl prints `yes` and exits 0, or `no` and 1).
/// kubectl cannot name `signers` or the `nodes` of `authentication.k8s.io` (constrained
/// impersonation), resources the API server only authorizes and does not serve: those
/// questions go to a SubjectAccessReview for the same user and groups
/// (impersonating a service account adds exactly these).
async fn allowed(cp: &ControlPlane, can: &Can) -> anyhow::Result<bool> {
    if let Some(signer) = can.what.strip_prefix("signers.certificates.k8s.io/") {
        return review(cp, can, "certificates.k8s.io", "signers", signer).await;
    }
    if can.what == "nodes.authentication.k8s.io" {
        return review(cp, can, "authentication.k8s.io", "nodes", "").await;
    }
    let output = run_kubectl(cp, can_i_args(can)).await?;
    let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl {} answered {answer:?}: {}",
            can_i_args(can).join(" "),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// A SubjectAccessReview of `can.verb` on `resource` (of API `group`) named `name` (any when
/// empty) for `can.sa`.
async fn review(
    cp: &ControlPlane,
    can: &Can,
    group: &str,
    resource: &str,
    name: &str,
) -> anyhow::Result<bool> {
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": format!("system:serviceaccount:verge-system:{}", can.sa),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:verge-system",
                "system:authenticated"],
            "resourceAttributes": {
                "group": group, "resource": resource,
                "name": name, "verb": can.verb,
            },
        },
    }))?;
    let reviews: Api<SubjectAccessReview> = Api::all(cp.client().await?);
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Objects of earlier versions of deploy/cloud/access/rbac.yaml that granted more; deleted
/// so that a shared control plane that saw them answers for the current manifests only.
const OBSOLETE: &[&str] = &[
    "role/verge-edgecontroller-ca",
    "rolebinding/verge-edgecontroller-ca",
    "role/verge-devicecontroller-hub",
    "rolebinding/verge-devicecontroller-hub",
    // A test-only Role of an earlier tests/src/cloud.rs (now in verge-e2e-leases).
    "role/verge-test-controller-leases",
    "rolebinding/verge-test-controller-leases",
];

/// Like [`OBSOLETE`], in kube-system: cloudhub's read of bootstrap-token Secrets, now the
/// optional deploy/cloud/optional/token-ca-discovery.yaml (also applied, then deleted, by
/// tests/tests/join.rs).
const OBSOLETE_KUBE_SYSTEM: &[&str] = &[
    "role/verge-cloudhub-bootstrap-tokens",
    "rolebinding/verge-cloudhub-bootstrap-tokens",
];

#[tokio::test]
async fn rbac_grants_what_the_code_calls_and_no_more() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    for (namespace, objects) in [
        ("verge-system", OBSOLETE),
        ("kube-system", OBSOLETE_KUBE_SYSTEM),
    ] {
        let mut delete = vec![
            "delete".to_owned(),
            "--ignore-not-found".to_owned(),
            format!("--namespace={namespace}"),
        ];
        delete.extend(objects.iter().map(|o| (*o).to_owned()));
        kubectl(&cp, delete).await?;
    }
    verge_testkit::install_cloud_rbac(&cp).await?;

    let mut wrong = Vec::new();
    for can in NEEDED.iter().chain(FORBIDDEN) {
        if allowed(&cp, can).await? != can.allowed {
            wrong.push(format!(
                "{} {} {} in {}: expected {}",
                can.sa,
                can.verb,
                can.what,
                can.scope,
                if can.allowed { "yes" } else { "no" }
            ));
        }
    }
    ensure!(
        wrong.is_empty(),
        "{} of {} RBAC checks wrong:\n{}",
        wrong.len(),
        NEEDED.len() + FORBIDDEN.len(),
        wrong.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn the_whole_kustomization_passes_a_server_side_dry_run() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    // Objects in verge-system are validated against an existing namespace (a dry run creates
    // nothing, not even the namespace): the access kustomization, applied for real, makes it.
    verge_testkit::install_cloud_rbac(&cp).await?;
    let dir = cloud_dir().display().to_string();
    let out = kubectl(
        &cp,
        vec![
            "apply".to_owned(),
            "--dry-run=server".to_owned(),
            "--validate=strict".to_owned(),
            "-k".to_owned(),
            dir,
        ],
    )
    .await?;
    for kind in [
        "deployment.apps/cloudhub",
        "deployment.apps/edgecontroller",
        "deployment.apps/devicecontroller",
        "deployment.apps/fleetcontroller",
        "poddisruptionbudget.policy/cloudhub",
        "service/cloudhub-controllers",
        "service/cloudhub-streams",
        "configmap/devicecontroller-config",
        "configmap/fleetcontroller-config",
    ] {
        ensure!(
            out.contains(kind),
            "the dry run did not list {kind}:\n{out}"
        );
    }
    // The optional manifests (applied by operators who turn their feature on) are valid too.
    let optional = cloud_dir().join("optional").display().to_string();
    let out = kubectl(
        &cp,
        [
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            &optional,
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await?;
    for kind in [
        "clusterrole.rbac.authorization.k8s.io/verge-edgecontroller-offline-toleration-patch",
        "validatingadmissionpolicy.admissionregistration.k8s.io/verge-edgecontroller-tolerations-only",
        "role.rbac.authorization.k8s.io/verge-cloudhub-bootstrap-tokens",
    ] {
        ensure!(
            out.contains(kind),
            "the dry run did not list {kind}:\n{out}"
        );
    }
    Ok(())
}
