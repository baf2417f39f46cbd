//! The cloud side deployed as Kubernetes workloads (issue 12): the images of `cargo xtask
//! images` on the test kit's kubelet node (kubelet, containerd, runc, CNI, kube-proxy),
//! `kubectl apply -k deploy/cloud`, and an edge installed as docs/install.md says — the
//! configuration from `deploy/edge`, `edgecore join` through cloudhub's Service, the agent
//! started with the systemd unit's command line. Then the two losses a cluster operator
//! meets: the leading edgecontroller's pod is deleted (the standby takes the Lease and new
//! pods keep reaching the edge), and cloudhub is scaled 2 → 3 and the replica holding the edge
//! is deleted (the edge moves to another replica; nothing it runs or reports is lost).

mod deployed_support;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use deployed_support::install::InstalledEdge;
use deployed_support::{Deployed, NAMESPACE};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use verge_e2e::{create_namespace, ready_status, sleeper_pod, wait_for, wait_running};
use verge_testkit::trust::{TokenKind, create_bootstrap_token};

/// How long a Deployment may take to become Available on the kubelet node.
const AVAILABLE: Duration = Duration::from_secs(180);

/// The bound: from deleting the leader's pod to a new pod running on the edge.
const FAIL_OVER: Duration = Duration::from_secs(15);

#[tokio::test]
async fn cloud_side_as_workloads_survives_losing_its_leader_and_a_replica() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let env = Deployed::node(cp).await?;
    let outcome = scenario(&env).await;
    let teardown = env.teardown().await;
    outcome?;
    teardown
}

async fn scenario(env: &Deployed) -> anyhow::Result<()> {
    let applied = Instant::now();
    env.apply()?;
    env.wait_available(AVAILABLE).await?;
    eprintln!(
        "deployed: every Deployment Available {:.1?} after kubectl apply -k deploy/cloud",
        applied.elapsed()
    );

    // An edge joins through the cloudhub Service, as an operator installs it.
    let hub = env.cloudhub_ip().await?;
    let id = &uuid_suffix();
    let name = format!("e2e-deployed-{id}");
    let token =
        create_bootstrap_token(&env.client, TokenKind::Valid, Duration::from_secs(3600)).await?;
    let mut edge = InstalledEdge::configure(&name, hub)?;
    let joined = edge.join(hub, &token)?;
    let joined = joined
        .lines()
        .find(|l| l.contains("joined"))
        .unwrap_or(&joined);
    eprintln!("deployed: {joined}");
    edge.start()?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    wait_for(
        &format!("node {name} Ready"),
        Duration::from_secs(60),
        || async {
            Ok(nodes
                .get_opt(&name)
                .await?
                .filter(|n| ready_status(n).as_deref() == Some("True")))
        },
    )
    .await
    .with_context(|| edge.logs(30))?;

    let ns = format!("e2e-deployed-{id}");
    create_namespace(&env.client, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let pp = PostParams::default();
    pods.create(&pp, &sleeper_pod(&ns, "first", &name)?).await?;
    wait_running(&pods, "first", Duration::from_secs(60))
        .await
        .with_context(|| edge.logs(30))?;
    eprintln!(
        "deployed: a pod running on the edge {:.1?} after kubectl apply -k deploy/cloud",
        applied.elapsed()
    );

    // The leading edgecontroller's pod is deleted: the standby takes the Lease.
    let leader = env
        .wait_lease_holder("edgecontroller", Duration::from_secs(30), None)
        .await?;
    let deleted = Instant::now();
    env.delete_pod(&leader).await?;
    let standby = env
        .wait_lease_holder("edgecontroller", FAIL_OVER, Some(&leader))
        .await?;
    let took_lease = deleted.elapsed();
    pods.create(&pp, &sleeper_pod(&ns, "after-fail-over", &name)?)
        .await?;
    wait_running(
        &pods,
        "after-fail-over",
        FAIL_OVER.saturating_sub(deleted.elapsed()),
    )
    .await
    .context("a pod created after the fail-over did not reach the edge in time")?;
    let reached = deleted.elapsed();
    eprintln!(
        "deployed: leader {leader} deleted; {standby} held the Lease after {took_lease:.1?}, \
         a new pod ran on the edge after {reached:.1?}"
    );
    ensure!(reached <= FAIL_OVER, "fail-over took {reached:?}");
    let first = running_container(&pods, "first").await?;

    // cloudhub 2 → 3, then the replica holding the edge is deleted.
    env.kubectl(&["-n", NAMESPACE, "scale", "deploy/cloudhub", "--replicas=3"])?;
    env.wait_available(AVAILABLE).await?;
    wait_for(
        "3 cloudhub replicas running",
        Duration::from_secs(60),
        || async { Ok((env.pods_of("cloudhub").await?.len() == 3).then_some(())) },
    )
    .await?;
    let holding = env.cloudhub_holding(&name).await?;
    let lost = Instant::now();
    env.delete_pod(&holding).await?;
    // A change the cloud makes while the edge moves: a pod deletion the edge must complete.
    pods.delete("after-fail-over", &DeleteParams::default())
        .await?;
    pods.create(&pp, &sleeper_pod(&ns, "after-replica-loss", &name)?)
        .await?;
    wait_running(&pods, "after-replica-loss", Duration::from_secs(60))
        .await
        .with_context(|| edge.logs(30))?;
    wait_for(
        "pod after-fail-over deleted by the edge",
        Duration::from_secs(60),
        || async {
            Ok(pods
                .get_opt("after-fail-over")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    let moved_to = env.cloudhub_holding(&name).await?;
    ensure!(
        moved_to != holding,
        "the edge is still on the deleted replica {holding}"
    );
    eprintln!(
        "deployed: replica {holding} deleted; the edge reconnected to {moved_to} and a new pod \
         ran after {:.1?}",
        lost.elapsed()
    );
    ensure!(
        running_container(&pods, "first").await? == first,
        "pod first changed while the edge moved"
    );
    let node = nodes.get(&name).await?;
    ensure!(
        ready_status(&node).as_deref() == Some("True"),
        "node not Ready"
    );
    pods.delete("first", &DeleteParams::default()).await?;
    pods.delete("after-replica-loss", &DeleteParams::default())
        .await?;
    drop(edge);
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    Ok(())
}

/// Pod `name`'s container id and restart count; fails unless it is Running.
async fn running_container(pods: &Api<Pod>, name: &str) -> anyhow::Result<(String, i32)> {
    let pod = pods.get(name).await?;
    let status = pod.status.context("no status")?;
    ensure!(
        status.phase.as_deref() == Some("Running"),
        "{name} not Running"
    );
    let container = status
        .container_statuses
        .and_then(|c| c.into_iter().next())
        .context("no container status")?;
    Ok((
        container.container_id.unwrap_or_default(),
        container.restart_count,
    ))
}

/// Eight hexadecimal digits that make this run's names unique.
fn uuid_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}
