//! Several cloudhub replicas lose nothing (architecture.md §1, §3): two cloudhub processes, one
//! edgecontroller attached to both, one edge on each. `kill -9` of one replica moves its
//! edge to the other (its `cloudhub_alternates`), which resyncs it; new pods still reach it
//! and its reports still reach the API server, while the other edge never notices.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use verge_e2e::{Cloud, Edge, create_namespace, ready_status, sleeper_pod, wait_for, wait_running};

/// The log line edgehub writes for every established session.
const SESSION_UP: &str = "cloudhub session established";

/// The node's `Ready` condition: (status, lastHeartbeatTime).
async fn ready(nodes: &Api<Node>, name: &str) -> anyhow::Result<Option<(String, String)>> {
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(None);
    };
    let heartbeat = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    Ok(ready_status(&node).map(|s| (s, heartbeat)))
}

/// The lines of `edge`'s log announcing an established session.
fn sessions(edge: &Edge) -> Vec<String> {
    edge.process
        .as_ref()
        .map(|p| p.log())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(SESSION_UP))
        .map(str::to_owned)
        .collect()
}

async fn cleanup(client: &Client, ns: &str, nodes: &[&str]) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    let api: Api<Node> = Api::all(client.clone());
    for node in nodes {
        let _ = verge_e2e::remove_managed_containers(|n| n == *node);
        let _ = api.delete(node, &DeleteParams::default()).await;
    }
}

/// Two replicas, edge A on hub-0 (alternate hub-1), edge B on hub-1 (alternate hub-0); a pod
/// on each Runs. `kill -9` hub-0: A reconnects to hub-1 and resyncs, a pod created for A
/// afterwards Runs, A's node status keeps reaching the API; B keeps its one session and its
/// pods.
#[tokio::test(flavor = "multi_thread")]
async fn killing_a_replica_moves_its_edges_and_loses_nothing() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start_replicas(&cp, 2).await?;
    let hub0 = cloud.edge_url.clone();
    let replica1 = cloud.second_replica()?;
    let hub1 = replica1.edge_url.clone();
    let pid = std::process::id();
    let (a, b, ns) = (
        format!("e2e-rep-a-{pid}"),
        format!("e2e-rep-b-{pid}"),
        format!("e2e-rep-{pid}"),
    );
    let mut edge_a = Edge::with_config(&a, &cloud, |c| {
        c.edge_hub.server_alternates = vec![hub1.clone()];
    })?;
    let mut edge_b = Edge::with_config(&b, &cloud, |c| {
        replica1.serve(c);
        c.edge_hub.server_alternates = vec![hub0.clone()];
    })?;
    edge_a.start()?;
    edge_b.start()?;

    let r = scenario(&client, &mut cloud, &edge_a, &edge_b, &hub1, &ns).await;
    if let Err(e) = r {
        anyhow::bail!(
            "{e:#}\n{}\n--- edgecore A ---\n{}\n--- edgecore B ---\n{}",
            cloud.logs(40),
            edge_a.logs(60),
            edge_b.logs(40)
        );
    }
    edge_a.kill9()?;
    edge_b.kill9()?;
    cleanup(&client, &ns, &[&a, &b]).await;
    Ok(())
}

async fn scenario(
    client: &Client,
    cloud: &mut Cloud,
    edge_a: &Edge,
    edge_b: &Edge,
    hub1: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let (a, b) = (edge_a.name.as_str(), edge_b.name.as_str());
    let nodes: Api<Node> = Api::all(client.clone());
    for node in [a, b] {
        wait_for(
            &format!("node {node} Ready"),
            Duration::from_secs(60),
            || async { Ok(ready(&nodes, node).await?.filter(|(s, _)| s == "True")) },
        )
        .await?;
    }
    create_namespace(client, ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &sleeper_pod(ns, "a1", a)?)
        .await?;
    pods.create(&PostParams::default(), &sleeper_pod(ns, "b1", b)?)
        .await?;
    wait_running(&pods, "a1", Duration::from_secs(90)).await?;
    wait_running(&pods, "b1", Duration::from_secs(90)).await?;
    let (_, heartbeat) = ready(&nodes, a).await?.unwrap_or_default();
    let (a_before, b_before) = (sessions(edge_a).len(), sessions(edge_b).len());
    cloud.cloudhub.kill9()?;

    // A moves to hub-1 (its alternate) and is resynced there.
    wait_for(
        "edge A's session on hub-1",
        Duration::from_secs(30),
        || async {
            let s = sessions(edge_a);
            Ok((s.len() > a_before && s.last().is_some_and(|l| l.contains(hub1))).then_some(()))
        },
    )
    .await?;
    pods.create(&PostParams::default(), &sleeper_pod(ns, "a2", a)?)
        .await?;
    wait_running(&pods, "a2", Duration::from_secs(60)).await?;
    // A's node status reports still reach the API server (through hub-1).
    wait_for(
        "a newer Ready heartbeat of node A",
        Duration::from_secs(30),
        || async {
            Ok(ready(&nodes, a)
                .await?
                .filter(|(s, h)| s == "True" && *h != heartbeat))
        },
    )
    .await?;
    wait_running(&pods, "a1", Duration::from_secs(5)).await?;

    // B never noticed: one session, its pod still Running, a new pod Runs too.
    pods.create(&PostParams::default(), &sleeper_pod(ns, "b2", b)?)
        .await?;
    wait_running(&pods, "b2", Duration::from_secs(60)).await?;
    wait_running(&pods, "b1", Duration::from_secs(5)).await?;
    anyhow::ensure!(
        sessions(edge_b).len() == b_before,
        "edge B reconnected although its replica stayed up"
    );
    Ok(())
}
