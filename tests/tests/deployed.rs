//! The cloud side deployed as Kubernetes workloads (issue 12): the images of `cargo xtask
//! images` on the test kit's kubelet node (kubelet, containerd, runc, CNI, kube-proxy),
//! `kubectl apply -k deploy/cloud`, and three edges installed as docs/install.md says — the
//! configuration from `deploy/edge`, `edgecore join` through cloudhub's Service, the agent
//! started with the systemd unit's command line. Then the two losses a cluster operator
//! meets: the leading edgecontroller's pod is deleted (the standby takes the Lease and new
//! pods keep reaching the edges), and cloudhub is scaled 2 → 3 and the replica holding the most
//! edges is deleted (each of its edges moves to another replica, the others keep their
//! sessions; nothing any edge runs or reports is lost). The Service spreads edges at random,
//! so the spread is printed, not asserted. Before that, an edge pod reaches a Service whose
//! pod runs on the kubelet node, through cloudhub (issue 32, across the link).

mod deployed_support;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use deployed_support::{Edges, running_container};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use verge_e2e::{
    create_namespace, http_get_in, main_container, sleeper_pod, wait_for, wait_running, web_pod,
};
use verge_testkit::KubeletNodeConfig;
use verge_testkit::deployment::{Deployment, NAMESPACE};

/// How long a Deployment may take to become Available on the kubelet node.
const AVAILABLE: Duration = Duration::from_secs(180);

/// The bound: from deleting the leader's pod to a new pod running on the edge.
const FAIL_OVER: Duration = Duration::from_secs(15);

/// Edges joined through the Service.
const EDGES: usize = 3;

#[tokio::test]
async fn cloud_side_as_workloads_survives_losing_its_leader_and_a_replica() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let started = Instant::now();
    let cp = verge_testkit::shared().await?;
    let env = Deployment::start(cp, &KubeletNodeConfig::from_env()).await?;
    let outcome = scenario(&env).await;
    let teardown = env.teardown().await;
    eprintln!("deployed: the test took {:.1?}", started.elapsed());
    outcome?;
    teardown
}

async fn scenario(env: &Deployment) -> anyhow::Result<()> {
    let applied = Instant::now();
    env.apply()?;
    env.wait_available(AVAILABLE).await?;
    eprintln!(
        "deployed: every Deployment Available {:.1?} after kubectl apply -k deploy/cloud",
        applied.elapsed()
    );

    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let edges = Edges::join(env, &format!("e2e-deployed-{id}"), EDGES).await?;
    let ns = format!("e2e-deployed-{id}");
    create_namespace(&env.client, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let pp = PostParams::default();
    for (i, edge) in edges.edges.iter().enumerate() {
        pods.create(&pp, &sleeper_pod(&ns, &format!("first-{i}"), &edge.name)?)
            .await?;
    }
    for (i, edge) in edges.edges.iter().enumerate() {
        wait_running(&pods, &format!("first-{i}"), Duration::from_secs(60))
            .await
            .with_context(|| edge.logs(30))?;
    }
    eprintln!(
        "deployed: a pod running on each of {EDGES} edges {:.1?} after kubectl apply -k deploy/cloud",
        applied.elapsed()
    );

    across_the_link(env, &edges, &pods).await?;
    fail_over(env, &edges, &pods).await?;
    let result = replica_loss(env, &edges, &pods).await;
    for edge in &edges.edges {
        let _ = Api::<Node>::all(env.client.clone())
            .delete(&edge.name, &DeleteParams::default())
            .await;
    }
    let _ = env.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    result
}

/// The leading edgecontroller's pod is deleted: the standby takes the Lease and a pod
/// created afterwards runs on an edge within [`FAIL_OVER`] of the deletion.
async fn fail_over(env: &Deployment, edges: &Edges, pods: &Api<Pod>) -> anyhow::Result<()> {
    let leader = env
        .wait_lease_holder("edgecontroller", Duration::from_secs(30), None)
        .await?;
    let deleted = Instant::now();
    env.delete_pod(&leader).await?;
    let standby = env
        .wait_lease_holder("edgecontroller", FAIL_OVER, Some(&leader))
        .await?;
    let took_lease = deleted.elapsed();
    let edge = &edges.edges[0];
    let ns = pods.namespace().unwrap_or_default().to_owned();
    pods.create(
        &PostParams::default(),
        &sleeper_pod(&ns, "after-fail-over", &edge.name)?,
    )
    .await?;
    wait_running(
        pods,
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
    Ok(())
}

/// cloudhub 2 → 3, then the replica holding the most edges is deleted while the cloud
/// deletes one pod and creates others on the moving edges.
async fn replica_loss(env: &Deployment, edges: &Edges, pods: &Api<Pod>) -> anyhow::Result<()> {
    env.kubectl(&["-n", NAMESPACE, "scale", "deploy/cloudhub", "--replicas=3"])?;
    env.wait_available(AVAILABLE).await?;
    wait_for(
        "3 cloudhub replicas running",
        Duration::from_secs(60),
        || async { Ok((env.pods_of("cloudhub").await?.len() == 3).then_some(())) },
    )
    .await?;
    let spread = edges.spread(env).await?;
    eprintln!("deployed: edges per cloudhub replica: {spread:?}");
    let (holding, moving) = spread
        .iter()
        .max_by_key(|(_, e)| e.len())
        .map(|(r, e)| (r.clone(), e.clone()))
        .context("no replica holds an edge")?;
    let ns = pods.namespace().unwrap_or_default().to_owned();
    let pp = PostParams::default();
    // A pod the cloud deletes while its edge moves.
    pods.create(&pp, &sleeper_pod(&ns, "doomed", &moving[0])?)
        .await?;
    wait_running(pods, "doomed", Duration::from_secs(60)).await?;

    let mut before = Vec::new();
    for i in 0..EDGES {
        before.push(running_container(pods, &format!("first-{i}")).await?);
    }
    let sessions = edges.sessions();
    let readiness = edges.readiness(&env.client).await?;

    let lost = Instant::now();
    env.delete_pod(&holding).await?;
    pods.delete("doomed", &DeleteParams::default()).await?;
    for (i, name) in moving.iter().enumerate() {
        pods.create(&pp, &sleeper_pod(&ns, &format!("during-move-{i}"), name)?)
            .await?;
    }
    for (i, name) in moving.iter().enumerate() {
        wait_running(pods, &format!("during-move-{i}"), Duration::from_secs(60))
            .await
            .with_context(|| edges.get(name).map(|e| e.logs(30)).unwrap_or_default())?;
    }
    wait_for(
        "pod doomed deleted by its edge",
        Duration::from_secs(60),
        || async { Ok(pods.get_opt("doomed").await?.is_none().then_some(())) },
    )
    .await?;
    let moved = lost.elapsed();

    let after = edges.spread(env).await?;
    eprintln!(
        "deployed: replica {holding} deleted; its edges {moving:?} moved, a new pod ran on each \
         after {moved:.1?}; now {after:?}"
    );
    let now = edges.sessions();
    for edge in &edges.edges {
        let (was, is) = (sessions[&edge.name], now[&edge.name]);
        if moving.contains(&edge.name) {
            ensure!(
                !after.get(&holding).is_some_and(|e| e.contains(&edge.name)),
                "{} is still on the deleted replica {holding}",
                edge.name
            );
            ensure!(is > was, "{} opened no new session", edge.name);
        } else {
            ensure!(
                is == was,
                "{} was not on {holding} but reconnected ({was} → {is} sessions)",
                edge.name
            );
        }
    }
    for (i, was) in before.iter().enumerate() {
        let name = format!("first-{i}");
        ensure!(
            &running_container(pods, &name).await? == was,
            "pod {name} changed its container or restarted while the edges moved"
        );
    }
    ensure!(
        edges.readiness(&env.client).await? == readiness,
        "a node's Ready condition changed while the edges moved"
    );
    Ok(())
}

/// An edge pod reaches, by cluster IP, a Service whose one pod runs on the kubelet node: the
/// edge does not reach that pod directly, so the connection goes through the deployed
/// cloudhub (`EdgeHub.Dial`), which dials the pod on its node.
async fn across_the_link(env: &Deployment, edges: &Edges, pods: &Api<Pod>) -> anyhow::Result<()> {
    let node = env.node().context("the kubelet node")?;
    // Blocks for a few seconds; nothing else runs in this test's runtime meanwhile.
    node.import_image(verge_testkit::docker::TEST_IMAGE)?;
    let ns = pods.namespace().unwrap_or_default().to_owned();
    let pp = PostParams::default();
    pods.create(&pp, &web_pod(&ns, "cloud-web", "cloud-web", node.name())?)
        .await?;
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "cloud-web" },
        "spec": { "selector": { "app": "cloud-web" },
            "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] }
    }))?;
    let cluster_ip = Api::<Service>::namespaced(env.client.clone(), &ns)
        .create(&pp, &service)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("cluster IP")?;
    let client = wait_running(pods, "first-0", Duration::from_secs(60)).await?;
    let id = main_container(&client.metadata.uid.unwrap_or_default())?;
    let url = format!("{cluster_ip}:80");
    let started = Instant::now();
    let last = std::sync::Mutex::new(String::new());
    wait_for(
        "an edge pod reaches the kubelet node's pod through cloudhub",
        AVAILABLE,
        || async {
            match http_get_in(&id, &url) {
                Ok(body) if body == "cloud-web" => Ok(Some(())),
                other => {
                    *last
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = format!("{other:?}");
                    Ok(None)
                }
            }
        },
    )
    .await
    .with_context(|| {
        format!(
            "last answer: {}\n{}",
            last.lock().map(|l| l.clone()).unwrap_or_default(),
            edges.edges[0].logs(40)
        )
    })?;
    eprintln!(
        "deployed: an edge pod reached Service cloud-web on the kubelet node through cloudhub \
         {:.1?} after it was created",
        started.elapsed()
    );
    Ok(())
}
