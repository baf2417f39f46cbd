//! An edge node joins the real cluster: Ready within 15 s of start, NotReady after edgecore
//! is killed (the cluster's node lifecycle controller, with the kit's short
//! node-monitor-grace-period), Ready again after edgecore restarts.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;
use verge_e2e::{Cloud, Edge, ready_status, wait_for};

async fn node_ready(nodes: &Api<Node>, name: &str, want: bool) -> anyhow::Result<Option<()>> {
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(None);
    };
    let ready = ready_status(&node).as_deref() == Some("True");
    Ok((ready == want).then_some(()))
}

#[tokio::test(flavor = "multi_thread")]
async fn edge_node_ready_notready_ready() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-edge-{}", std::process::id());
    let mut edge = Edge::with_config(&name, &cloud, |c| {
        c.edged.node_labels.insert("site".into(), "e2e".into());
    })?;

    let started = Instant::now();
    edge.start()?;
    let r = wait_for("edge node Ready", Duration::from_secs(15), || {
        node_ready(&nodes, &name, true)
    })
    .await;
    if let Err(e) = r {
        anyhow::bail!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(40),
            edge.logs(40)
        );
    }
    let to_ready = started.elapsed();
    eprintln!("edge node Ready {to_ready:?} after edgecore start");

    let node = nodes.get(&name).await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("node-role.kubernetes.io/edge")
            .map(String::as_str),
        Some("")
    );
    assert_eq!(labels.get("site").map(String::as_str), Some("e2e"));
    let status = node.status.clone().unwrap_or_default();
    assert!(
        status
            .capacity
            .as_ref()
            .is_some_and(|c| c.contains_key("cpu") && c.contains_key("memory"))
    );
    assert!(
        status
            .node_info
            .as_ref()
            .is_some_and(|i| i.kubelet_version.starts_with("v1.37"))
    );
    // The Lease is renewed on its own timer, so it may land a moment after the Ready status.
    let holder = wait_for("node Lease", Duration::from_secs(15), || async {
        let lease = leases.get_opt(&name).await?;
        Ok(lease.map(|l| l.spec.and_then(|s| s.holder_identity)))
    })
    .await?;
    assert_eq!(holder.as_deref(), Some(name.as_str()));

    edge.kill9()?;
    let killed = Instant::now();
    wait_for(
        "edge node NotReady after kill -9",
        Duration::from_secs(60),
        || node_ready(&nodes, &name, false),
    )
    .await?;
    eprintln!("edge node NotReady {:?} after kill -9", killed.elapsed());

    edge.start()?;
    let restarted = Instant::now();
    let r = wait_for(
        "edge node Ready after restart",
        Duration::from_secs(30),
        || node_ready(&nodes, &name, true),
    )
    .await;
    if let Err(e) = r {
        anyhow::bail!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(40),
            edge.logs(40)
        );
    }
    eprintln!(
        "edge node Ready again {:?} after restart",
        restarted.elapsed()
    );

    edge.kill9()?;
    nodes.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}
