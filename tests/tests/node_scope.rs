//! Issue 31, weakness 4: the API server, not only edgecontroller's own checks, bounds what
//! edgecontroller can do. Run with edgecontroller's real service-account token and the shipped
//! RBAC (deploy/cloud/access) on the real control plane (Node authorizer,
//! NodeRestriction), against a Node with the edge label and a pod bound to it (no kubelet
//! needed: the API server's node graph only needs the binding).
//!
//! Each step is an attack a compromised edgecontroller would try; before the change its RBAC
//! allowed every one of them (list every Secret, mint a kube-system token, change a pod's
//! image, write any Node).

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;
use verge_testkit::trust::service_account_credentials;

/// edgecontroller's own client: its service account's token, nothing of the admin's.
async fn edgecontroller_client(cp: &verge_testkit::ControlPlane) -> anyhow::Result<Client> {
    let dir = tempfile::tempdir()?;
    let (path, _) = service_account_credentials(cp, "edgecontroller", dir.path()).await?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&path)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

/// Whether `result` failed with HTTP `code`.
fn refused<T>(result: &kube::Result<T>, code: u16) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == code)
}

#[tokio::test]
async fn edgecontroller_acts_for_a_node_only_within_that_node() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    let admin = cp.client().await?;
    verge_testkit::trust::ensure_controller_accounts(&admin).await?;
    verge_testkit::install_cloud_rbac(&cp).await?;
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let (ns, node, other) = (
        format!("scope-{suffix}"),
        format!("scope-edge-{suffix}"),
        format!("scope-other-{suffix}"),
    );

    // The world: two edge Nodes, a pod on the first using Secret `used`; Secret `unused`.
    let nodes: Api<Node> = Api::all(admin.clone());
    for name in [&node, &other] {
        let object: Node = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { verge_core::EDGE_NODE_LABEL: "" } },
        }))?;
        nodes.create(&PostParams::default(), &object).await?;
    }
    verge_e2e::create_namespace(&admin, &ns).await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let result = attacks(&cp, &admin, &ns, &node, &other).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    for name in [&node, &other] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
    result
}

async fn attacks(
    cp: &verge_testkit::ControlPlane,
    admin: &Client,
    ns: &str,
    node: &str,
    other: &str,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    for name in ["used", "unused"] {
        let object: Secret = serde_json::from_value(
            json!({ "metadata": { "name": name }, "stringData": { "k": name } }),
        )?;
        secrets.create(&PostParams::default(), &object).await?;
    }
    // The namespace's default service account is made by the controller-manager.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let mut waited = 0;
    while accounts.get_opt("default").await?.is_none() {
        ensure!(waited < 100, "no default service account in {ns}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "app" },
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "c", "image": "verge.test/none:1" }],
            "volumes": [{ "name": "s", "secret": { "secretName": "used" } },
                { "name": "t", "projected": { "sources": [
                    { "serviceAccountToken": { "path": "token" } }] } }],
        },
    }))?;
    let pod = pods.create(&PostParams::default(), &pod).await?;

    let ec = edgecontroller_client(cp).await?;
    let as_node = verge_runtime::as_node(&ec, node);
    let as_other = verge_runtime::as_node(&ec, other);

    // As the node: its pod's Secret, once the node graph has the pod (milliseconds).
    let node_secrets: Api<Secret> = Api::namespaced(as_node.clone(), ns);
    let mut attempt = 0;
    loop {
        match node_secrets.get("used").await {
            Ok(_) => break,
            Err(e) if attempt < 50 => {
                attempt += 1;
                tracing::debug!(%e, "node graph not there yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("the node reads the Secret its pod uses"),
        }
    }
    // Attack: a Secret no pod of the node uses, another node's, a list of kube-system's.
    ensure!(
        refused(&node_secrets.get("unused").await, 403),
        "node read an unused Secret"
    );
    let other_secrets: Api<Secret> = Api::namespaced(as_other.clone(), ns);
    ensure!(
        refused(&other_secrets.get("used").await, 403),
        "another node read the Secret"
    );
    let system: Api<Secret> = Api::namespaced(as_node.clone(), "kube-system");
    ensure!(
        refused(&system.list(&ListParams::default()).await, 403),
        "node listed kube-system Secrets"
    );
    // Attack: edgecontroller in its own name.
    let own: Api<Secret> = Api::all(ec.clone());
    ensure!(
        refused(&own.list(&ListParams::default()).await, 403),
        "listed every Secret"
    );
    let own_ns: Api<Secret> = Api::namespaced(ec.clone(), ns);
    ensure!(
        refused(&own_ns.get("used").await, 403),
        "read a Secret in its own name"
    );

    // Tokens: for the pod's service account bound to the pod, yes; kube-system's, no.
    let token = |pod: Option<&Pod>| TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            bound_object_ref: pod.map(|p| BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
            }),
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let node_accounts: Api<ServiceAccount> = Api::namespaced(as_node.clone(), ns);
    node_accounts
        .create_token_request("default", &PostParams::default(), &token(Some(&pod)))
        .await
        .context("the node mints its pod's token")?;
    for (client, namespace) in [(&as_node, "kube-system"), (&ec, "kube-system"), (&ec, ns)] {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let answer = api
            .create_token_request("default", &PostParams::default(), &token(None))
            .await;
        ensure!(
            refused(&answer, 403),
            "minted a token of {namespace}/default: {answer:?}"
        );
    }

    // Pods: edgecontroller may not patch a pod at all (RBAC), neither its image, nor its
    // labels, nor its tolerations (the offline tolerations come from admission at creation,
    // deploy/cloud/access/offline-tolerations.yaml).
    let own_pods: Api<Pod> = Api::namespaced(ec.clone(), ns);
    let patches = [
        (
            "an image",
            Patch::Strategic(
                json!({ "spec": { "containers": [{ "name": "c", "image": "evil.test/x:1" }] } }),
            ),
        ),
        (
            "labels",
            Patch::Merge(json!({ "metadata": { "labels": { "app": "stolen-traffic" } } })),
        ),
        (
            "tolerations",
            Patch::Merge(json!({ "spec": { "tolerations": [{
            "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
        }] } })),
        ),
    ];
    for (what, patch) in patches {
        let answer = own_pods.patch("app", &PatchParams::default(), &patch).await;
        ensure!(
            refused(&answer, 403),
            "edgecontroller patched a pod's {what}: {answer:?}"
        );
    }

    // Nodes: as one node, another's status is refused; its own control-plane label and taints
    // are refused by NodeRestriction; in its own name, nothing.
    let other_nodes: Api<Node> = Api::all(as_other.clone());
    let status = json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
    ensure!(
        refused(
            &other_nodes
                .patch_status(node, &PatchParams::default(), &Patch::Strategic(status))
                .await,
            403
        ),
        "a node wrote another node's status"
    );
    let own_nodes: Api<Node> = Api::all(as_node.clone());
    let role = json!({ "metadata": { "labels": {
        "node-role.kubernetes.io/control-plane": "" } } });
    ensure!(
        refused(
            &own_nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(role))
                .await,
            403
        ),
        "a node gave itself the control-plane role"
    );
    let taint = json!({ "spec": { "taints": [{ "key": "x", "effect": "NoSchedule" }] } });
    ensure!(
        refused(
            &own_nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(taint))
                .await,
            403
        ),
        "a node changed its taints"
    );
    let ec_nodes: Api<Node> = Api::all(ec.clone());
    let label = json!({ "metadata": { "labels": { "verge.test/x": "1" } } });
    ensure!(
        refused(
            &ec_nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(label))
                .await,
            403
        ),
        "edgecontroller wrote a Node in its own name"
    );
    Ok(())
}
