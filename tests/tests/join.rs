//! Joining with a Kubernetes bootstrap token, as an operator does it: a token Secret made
//! with kubectl, `edgecore join` with the Verge CA pinned, the CSR visible as Approved,Issued
//! in `kubectl get csr`, then the node Ready over mutual TLS, its Node created with the edge's
//! `edged.registerWithTaints`. A join without a pin (cloudhub's token CA discovery is off by
//! default, issue 31), expired, unknown and wrong-usage tokens (refused by the API server's
//! TokenReview), a name owned by a non-edge Node and a second join under a joined edge node's
//! name are refused with clear errors, leaving no approved CSR and no Node behind. With
//! `trust.tokenCaDiscovery` and the optional Role of
//! `deploy/cloud/optional/token-ca-discovery.yaml`, an unpinned join discovers the CA with
//! the token (`GetCa`'s MAC, its check of the token's Secret).

use std::process::Output;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, PostParams};
use verge_e2e::{Cloud, Edge, ready_status, wait_for};
use verge_edgecore::edged::config::TaintConfig;
use verge_testkit::ControlPlane;
use verge_testkit::process::workspace_bin;

/// Creates a bootstrap-token Secret with `kubectl create secret generic` (kubeadm's format);
/// returns the token.
fn kubectl_token(
    cp: &ControlPlane,
    id: &str,
    expiration: SystemTime,
    usages: &[&str],
) -> anyhow::Result<String> {
    // 16 characters of [a-z0-9], derived from the id so each test token is distinct.
    let secret: String = format!("{id}0123456789abcdef").chars().take(16).collect();
    let expiration = chrono::DateTime::<chrono::Utc>::from(expiration)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut cmd = cp.kubectl_command();
    cmd.args([
        "-n",
        "kube-system",
        "create",
        "secret",
        "generic",
        &format!("bootstrap-token-{id}"),
        "--type",
        "bootstrap.kubernetes.io/token",
        &format!("--from-literal=token-id={id}"),
        &format!("--from-literal=token-secret={secret}"),
        &format!("--from-literal=expiration={expiration}"),
    ]);
    for usage in usages {
        cmd.arg(format!("--from-literal=usage-bootstrap-{usage}=true"));
    }
    let out = cmd.output()?;
    ensure!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(format!("{id}.{secret}"))
}

/// `edgecore --config <edge's config> join --cloudhub <join> --token <token> [--ca-cert-hash]`.
fn join(edge: &Edge, cloud: &Cloud, token: &str, hash: Option<&str>) -> anyhow::Result<Output> {
    let mut cmd = std::process::Command::new(workspace_bin("edgecore")?);
    cmd.arg("--config").arg(edge.config_path()).args([
        "join",
        "--cloudhub",
        &cloud.join_url,
        "--token",
        token,
    ]);
    if let Some(hash) = hash {
        cmd.args(["--ca-cert-hash", hash]);
    }
    Ok(cmd.output()?)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// CSRs of signer verge.io/edge-node naming `node` in their generated name.
async fn csrs_for(
    client: &kube::Client,
    node: &str,
) -> anyhow::Result<Vec<CertificateSigningRequest>> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.spec.signer_name == "verge.io/edge-node")
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains(&format!("-{node}-")))
        })
        .collect())
}

#[tokio::test]
async fn bootstrap_token_join_and_refusals() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let pid = std::process::id();
    let tag = format!("{:06x}", pid % 0xff_ffff);
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let r = async {
        // Refusals first. No CSR, no Node.
        let refused_name = format!("e2e-join-refused-{pid}");
        let refused = Edge::with_config(&refused_name, &cloud, |c| c.edge_hub.token.clear())?;
        let valid = kubectl_token(
            &cp,
            &format!("v{}", &tag[1..]),
            now + hour,
            &["authentication", "signing"],
        )?;
        // Without a pin, even a valid token is refused: cloudhub's token CA discovery is off
        // by default (it would read the token's Secret in kube-system), and edgecore says to
        // pin the CA.
        let out = join(&refused, &cloud, &valid, None)?;
        let said = text(&out);
        ensure!(!out.status.success(), "unpinned join succeeded: {said}");
        ensure!(
            said.contains("CA discovery by bootstrap token is off")
                && said.contains("--ca-cert-hash"),
            "unclear error: {said}"
        );
        ensure!(
            !said.contains(valid.split('.').nth(1).unwrap_or("-")),
            "secret printed: {said}"
        );
        // With the CA pinned there is no GetCa: JoinNode has the API server authenticate the
        // token (a TokenReview), which refuses expired, wrong-usage and unknown tokens alike.
        let expired = kubectl_token(
            &cp,
            &format!("x{}", &tag[1..]),
            now - hour,
            &["authentication", "signing"],
        )?;
        let wrong = kubectl_token(&cp, &format!("w{}", &tag[1..]), now + hour, &["signing"])?;
        let unknown = format!("u{}.0123456789abcdef", &tag[1..]);
        let hash = ca_hash(&cp).await?;
        ensure!(
            hash == cloud.ca_cert_hash,
            "the operator's pin differs from the kit's"
        );
        for token in [&expired, &wrong, &unknown] {
            let out = join(&refused, &cloud, token, Some(&hash))?;
            let said = text(&out);
            ensure!(!out.status.success(), "pinned join succeeded: {said}");
            ensure!(
                said.contains("does not authenticate"),
                "unclear error: {said}"
            );
        }
        ensure!(
            csrs_for(&client, &refused_name).await?.is_empty(),
            "a CSR for a refused join"
        );
        let nodes: Api<Node> = Api::all(client.clone());
        ensure!(
            nodes.get_opt(&refused_name).await?.is_none(),
            "a Node for a refused join"
        );
        // Without a certificate (and no token to join with), edgecore says how to join.
        let run = std::process::Command::new(workspace_bin("edgecore")?)
            .arg("--config")
            .arg(refused.config_path())
            .output()?;
        ensure!(!run.status.success(), "edgecore ran without a certificate");
        ensure!(
            text(&run).contains("edgecore join"),
            "no join hint: {}",
            text(&run)
        );

        // A Node that is not a Verge edge node cannot be taken over.
        let worker = format!("e2e-worker-{pid}");
        let node = Node {
            metadata: ObjectMeta {
                name: Some(worker.clone()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let before = nodes.create(&PostParams::default(), &node).await?;
        let takeover = Edge::with_config(&worker, &cloud, |c| c.edge_hub.token.clear())?;
        let out = join(&takeover, &cloud, &valid, Some(&hash))?;
        ensure!(!out.status.success(), "took over {worker}: {}", text(&out));
        ensure!(
            text(&out).contains("not a Verge edge node"),
            "{}",
            text(&out)
        );
        // Its labels (what a registration would merge into) are as created; controllers of
        // the cluster may annotate or taint it, Verge writes nothing.
        let after = nodes.get(&worker).await?;
        ensure!(
            after.metadata.labels == before.metadata.labels,
            "the worker Node's labels changed: {:?}",
            after.metadata.labels
        );
        ensure!(
            csrs_for(&client, &worker).await?.is_empty(),
            "a CSR for the worker"
        );
        nodes.delete(&worker, &Default::default()).await?;

        // The join: pinned CA hash, CSR Approved,Issued, node Ready over mTLS. The Node is
        // created with the edge's registerWithTaints (a node may not change its taints later
        // under NodeRestriction).
        let name = format!("e2e-join-{pid}");
        let mut edge = Edge::with_config(&name, &cloud, |c| {
            c.edge_hub.token.clear();
            c.edged.register_with_taints = vec![TaintConfig {
                key: "example.com/e2e-join".to_owned(),
                value: "registered".to_owned(),
                effect: "NoSchedule".to_owned(),
            }];
        })?;
        let out = join(&edge, &cloud, &valid, Some(&hash))?;
        ensure!(out.status.success(), "join failed: {}", text(&out));
        let taints = nodes
            .get(&name)
            .await?
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default();
        ensure!(
            taints.iter().any(|t| t.key == "example.com/e2e-join"
                && t.value.as_deref() == Some("registered")
                && t.effect == "NoSchedule"),
            "the joined Node lacks its registerWithTaints: {taints:?}"
        );
        let csrs = csrs_for(&client, &name).await?;
        ensure!(csrs.len() == 1, "one CSR for the join, got {}", csrs.len());
        let csr_name = csrs[0].metadata.name.clone().context("csr name")?;
        ensure!(
            text(&out).contains(&csr_name),
            "join output names the CSR: {}",
            text(&out)
        );
        let get = cp
            .kubectl_command()
            .args(["get", "csr", &csr_name])
            .output()?;
        let shown = String::from_utf8_lossy(&get.stdout).to_string();
        ensure!(
            shown.contains("Approved,Issued"),
            "kubectl get csr: {shown}"
        );
        ensure!(
            shown.contains("verge.io/edge-node"),
            "kubectl get csr: {shown}"
        );
        edge.start()?;
        wait_for("joined node Ready", Duration::from_secs(30), || {
            let nodes = nodes.clone();
            let name = name.clone();
            async move {
                let ready = nodes
                    .get_opt(&name)
                    .await?
                    .is_some_and(|n| ready_status(&n).as_deref() == Some("True"));
                Ok(ready.then_some(()))
            }
        })
        .await?;

        // Issue 31, weakness 2: a join under the joined node's name, with a fresh token of
        // its own, is refused; no CSR is made for it and the node's session stays.
        let fresh = kubectl_token(
            &cp,
            &format!("t{}", &tag[1..]),
            now + hour,
            &["authentication", "signing"],
        )?;
        let intruder = Edge::with_config(&name, &cloud, |c| c.edge_hub.token.clear())?;
        let out = join(&intruder, &cloud, &fresh, Some(&hash))?;
        ensure!(!out.status.success(), "took over {name}: {}", text(&out));
        ensure!(
            text(&out).contains("already joined"),
            "unclear refusal: {}",
            text(&out)
        );
        ensure!(
            csrs_for(&client, &name).await?.len() == 1,
            "a CSR for the refused join"
        );
        let node = nodes.get(&name).await?;
        ensure!(
            ready_status(&node).as_deref() == Some("True"),
            "the node is no longer Ready"
        );

        // Deleting the Node revokes the node's certificate (it is bound to the Node's uid):
        // its session ends, every reconnect is refused, and registration does not bring the
        // Node back.
        let uid = node.metadata.uid.clone().context("node uid")?;
        let bound = std::fs::read_to_string(edge.data_dir().join("pki").join("node.crt"))?;
        let der = verge_pki::pem_io::cert_from_pem(&bound)?;
        ensure!(
            verge_pki::node_uid(&der)?.as_deref() == Some(uid.as_str()),
            "the certificate is not bound to the Node's uid {uid}"
        );
        verge_testkit::trust::forget_node(&client, &name).await?;
        wait_for("the deleted node refused", Duration::from_secs(60), || {
            let logs = cloud.logs(400);
            async move { Ok(logs.contains("revoked").then_some(())) }
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        ensure!(
            nodes.get_opt(&name).await?.is_none(),
            "the deleted Node came back"
        );
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = r {
        bail!("{e:#}\n{}", cloud.logs(40));
    }
    Ok(())
}

/// The optional manifest that lets cloudhub read bootstrap-token Secrets for token CA
/// discovery.
fn token_ca_discovery_manifest() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/cloud/optional/token-ca-discovery.yaml")
}

/// `kubectl <verb> -f deploy/cloud/optional/token-ca-discovery.yaml` (`delete` ignores what
/// is gone already).
fn kubectl_optional_rbac(cp: &ControlPlane, verb: &str) -> anyhow::Result<()> {
    let mut cmd = cp.kubectl_command();
    cmd.arg(verb).arg("-f").arg(token_ca_discovery_manifest());
    if verb == "delete" {
        cmd.arg("--ignore-not-found");
    }
    let out = cmd.output()?;
    ensure!(out.status.success(), "kubectl {verb}: {}", text(&out));
    Ok(())
}

/// Whether cloudhub's service account may get Secrets in kube-system (`kubectl auth can-i`).
fn cloudhub_reads_kube_system_secrets(cp: &ControlPlane) -> anyhow::Result<bool> {
    let out = cp
        .kubectl_command()
        .args([
            "auth",
            "can-i",
            "get",
            "secrets",
            "-n",
            "kube-system",
            "--as=system:serviceaccount:verge-system:cloudhub",
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
}

/// Token CA discovery, opted into: cloudhub with `trust.tokenCaDiscovery: true` and the
/// optional Role applied. An edge without a CA pin joins as before issue 31: `GetCa` answers
/// the CA with the token's MAC, checked against the token's Secret (expired, wrong-usage and
/// unknown tokens refused, saying which), and the join goes through. The Role is deleted
/// afterwards, so the shared control plane keeps the shipped least privilege.
#[tokio::test]
async fn unpinned_join_with_token_ca_discovery_opted_in() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    kubectl_optional_rbac(&cp, "apply")?;
    let r = async {
        wait_for(
            "cloudhub may read kube-system Secrets",
            Duration::from_secs(30),
            || {
                let allowed = cloudhub_reads_kube_system_secrets(&cp);
                async move { Ok(allowed?.then_some(())) }
            },
        )
        .await?;
        let cloud = Cloud::start_with_token_ca_discovery(&cp).await?;
        let r = discovery_joins(&cp, &client, &cloud).await;
        if let Err(e) = r {
            bail!("{e:#}\n{}", cloud.logs(40));
        }
        anyhow::Ok(())
    }
    .await;
    let cleaned = kubectl_optional_rbac(&cp, "delete");
    r?;
    cleaned
}

/// The unpinned joins of [`unpinned_join_with_token_ca_discovery_opted_in`].
async fn discovery_joins(
    cp: &ControlPlane,
    client: &kube::Client,
    cloud: &Cloud,
) -> anyhow::Result<()> {
    let pid = std::process::id();
    let tag = format!("{:06x}", pid % 0xff_ffff);
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let name = format!("e2e-join-discovery-{pid}");
    let edge = Edge::with_config(&name, cloud, |c| {
        c.edge_hub.token.clear();
        c.edge_hub.ca_cert_hash = None;
    })?;
    // GetCa checks the token's Secret and says what is wrong with it.
    let expired = kubectl_token(
        cp,
        &format!("y{}", &tag[1..]),
        now - hour,
        &["authentication", "signing"],
    )?;
    let wrong = kubectl_token(cp, &format!("z{}", &tag[1..]), now + hour, &["signing"])?;
    let unknown = format!("q{}.0123456789abcdef", &tag[1..]);
    for (token, expect) in [
        (&expired, "expired"),
        (&wrong, "usage"),
        (&unknown, "unknown"),
    ] {
        let out = join(&edge, cloud, token, None)?;
        let said = text(&out);
        ensure!(
            !out.status.success(),
            "join with {expect:?} token succeeded: {said}"
        );
        ensure!(
            said.contains(expect),
            "error does not say {expect:?}: {said}"
        );
        ensure!(
            !said.contains(token.split('.').nth(1).unwrap_or("-")),
            "secret printed: {said}"
        );
    }
    ensure!(
        csrs_for(client, &name).await?.is_empty(),
        "a CSR for a refused join"
    );
    // A valid token: the CA is discovered (its MAC checks out) and the join goes through.
    let valid = kubectl_token(
        cp,
        &format!("d{}", &tag[1..]),
        now + hour,
        &["authentication", "signing"],
    )?;
    let out = join(&edge, cloud, &valid, None)?;
    ensure!(out.status.success(), "unpinned join failed: {}", text(&out));
    let csrs = csrs_for(client, &name).await?;
    ensure!(csrs.len() == 1, "one CSR for the join, got {}", csrs.len());
    let nodes: Api<Node> = Api::all(client.clone());
    ensure!(
        nodes.get_opt(&name).await?.is_some(),
        "the join created no Node"
    );
    let ca = std::fs::read_to_string(edge.data_dir().join("pki").join("ca.crt"))?;
    ensure!(
        verge_pki::ca_cert_hash(&ca)? == cloud.ca_cert_hash,
        "the discovered CA is not the Verge CA"
    );
    verge_testkit::trust::forget_node(client, &name).await?;
    Ok(())
}

/// The CA hash as an operator computes it from the published CA certificate.
async fn ca_hash(cp: &ControlPlane) -> anyhow::Result<String> {
    let out = cp
        .kubectl_command()
        .args([
            "-n",
            "verge-system",
            "get",
            "configmap",
            "verge-ca",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ])
        .output()?;
    ensure!(out.status.success(), "kubectl get configmap verge-ca");
    Ok(verge_pki::ca_cert_hash(&String::from_utf8(out.stdout)?)?)
}
