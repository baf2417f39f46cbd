//! Leader election of edgecontroller replicas against a real API server (verge-testkit) and
//! an in-test ControllerHub playing cloudhub: only the leader attaches; when it stops, the
//! standby takes over within about a retry period and serves the edges; a leader whose
//! Lease is taken stops acting.

mod common;

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;
use verge_controller::config::LeaderElectionConfig;
use verge_core::Operation;
use verge_edgecontroller::Config;
use verge_proto::{Inventory, MessageExt};

use common::probe::{Probe, WAIT, ack, connect, next_downstream};
use common::{Attach, Controller};

/// The namespace of the test Leases.
const LEASES: &str = "verge-system";

fn config(addr: std::net::SocketAddr, election: &LeaderElectionConfig, identity: &str) -> Config {
    Config {
        cloudhub: vec![format!("https://{addr}")],
        cloudhub_auth: common::hub_auth(),
        leader_election: LeaderElectionConfig {
            identity: Some(identity.to_owned()),
            ..election.clone()
        },
        ..Config::default()
    }
}

#[tokio::test]
async fn standby_takes_over_when_the_leader_stops() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let (addr, mut attaches) = common::start().await?;
    let election = common::leader_election(&client, "failover").await?;
    let lease_name = election.lease_name.clone().context("lease name")?;

    let a = Controller::spawn(config(addr, &election, "ec-a"), client.clone());
    let (first, _) = common::next_hello(&mut attaches).await?;
    ensure!(
        a.leadership.is_leader(),
        "the first replica attached without leading"
    );
    let b = Controller::spawn(config(addr, &election, "ec-b"), client.clone());
    // The standby polls the Lease but never attaches.
    let quiet = tokio::time::timeout(Duration::from_secs(6), attaches.recv()).await;
    ensure!(
        quiet.is_err(),
        "the standby attached while the leader leads"
    );
    let standby = b.leadership.status();
    ensure!(
        !standby.leading && standby.holder.as_deref() == Some("ec-a"),
        "{standby:?}"
    );

    // The leader stops (SIGTERM): it drains and releases the Lease; the standby attaches.
    let stopping = Instant::now();
    a.stop().await?;
    drop(first);
    let (mut second, hello) = common::next_hello(&mut attaches).await?;
    let failover = stopping.elapsed();
    eprintln!("leader fail-over after a graceful stop: {failover:?} (retryPeriod 2s)");
    ensure!(hello.name == "edgecontroller");
    ensure!(b.leadership.is_leader(), "attached without leading");
    ensure!(
        failover < Duration::from_secs(8),
        "fail-over took {failover:?}, more than the standby's jittered retry (≤ 4.4 s) + drain"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES);
    let lease = leases.get(&lease_name).await?.spec.context("lease spec")?;
    ensure!(
        lease.holder_identity.as_deref() == Some("ec-b") && lease.lease_transitions >= Some(1),
        "{lease:?}"
    );

    // The new leader serves the edges: a pod created now reaches the node's session.
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (node, ns) = (format!("ec-lead-{id}"), format!("ec-lead-{id}"));
    let result = tokio::time::timeout(
        Duration::from_secs(120),
        pod_reaches_the_edge(&mut second, &client, &node, &ns),
    )
    .await
    .context("scenario timed out")
    .and_then(|r| r);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
    let elapsed = result?;
    eprintln!("a pod created after the fail-over reached the edge {elapsed:?} after its creation");

    // The last leader releases the Lease on its way out.
    b.stop().await?;
    let lease = leases.get(&lease_name).await?.spec.context("lease spec")?;
    ensure!(
        lease.holder_identity.unwrap_or_default().is_empty(),
        "not released"
    );
    let _ = leases.delete(&lease_name, &DeleteParams::default()).await;
    Ok(())
}

/// Registers `node` (an edge Node), connects it on `attach`, creates a pod bound to it and
/// waits for the pod's `update`; returns how long that took from the pod's creation.
async fn pod_reaches_the_edge(
    attach: &mut Attach,
    client: &kube::Client,
    node: &str,
    ns: &str,
) -> anyhow::Result<Duration> {
    let pp = PostParams::default();
    Api::<Namespace>::all(client.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    let edge_node = json!({ "metadata": { "name": node,
        "labels": { "node-role.kubernetes.io/edge": "" } } });
    Api::<Node>::all(client.clone())
        .create(&pp, &serde_json::from_value(edge_node)?)
        .await?;
    let h = &mut Probe::new(attach);
    connect(h, node, Inventory::default()).await?;
    // The node's own object, then the resync marker (each acked as the edge does).
    loop {
        let m = next_downstream(h, WAIT)
            .await?
            .context("no resync marker")?;
        ack(h, node, &m).await?;
        if m.operation()? == Operation::Resync {
            break;
        }
    }
    let pod = json!({
        "metadata": { "name": "p" },
        "spec": { "nodeName": node, "automountServiceAccountToken": false,
            "containers": [{ "name": "c", "image": "busybox" }] }
    });
    let created = Instant::now();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&pp, &serde_json::from_value(pod)?)
        .await?;
    let want = format!("node/{node}/{ns}/pod/p");
    loop {
        let m = next_downstream(h, WAIT)
            .await?
            .context("the pod never came down")?;
        ack(h, node, &m).await?;
        if m.resource() == want && m.operation()? == Operation::Update {
            return Ok(created.elapsed());
        }
    }
}

#[tokio::test]
async fn leader_whose_lease_is_taken_stops_acting() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let (addr, mut attaches) = common::start().await?;
    let election = common::leader_election(&client, "stolen").await?;
    let lease_name = election.lease_name.clone().context("lease name")?;
    let a = Controller::spawn(config(addr, &election, "ec-a"), client.clone());
    let (mut attached, _) = common::next_hello(&mut attaches).await?;

    // Another holder takes the Lease by force (a patch that ignores its resourceVersion).
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES);
    let now = MicroTime(Timestamp::now());
    let theft = json!({ "spec": { "holderIdentity": "thief", "leaseDurationSeconds": 60,
        "acquireTime": now, "renewTime": now } });
    let stolen = Instant::now();
    leases
        .patch(&lease_name, &PatchParams::default(), &Patch::Merge(theft))
        .await?;

    // At its next renewal (every retryPeriod, 2 s) the leader sees it and stops acting.
    let result = a.ended(Duration::from_secs(15)).await?;
    let stopped = stolen.elapsed();
    eprintln!("leader stopped {stopped:?} after its Lease was taken");
    let Err(error) = result else {
        bail!("the leader kept running");
    };
    let reason = verge_controller::error::reason(&error);
    ensure!(
        reason.contains("lost the leader lease") && reason.contains("thief"),
        "{reason}"
    );
    // Its cloudhub stream ended with it.
    let ended = tokio::time::timeout(Duration::from_secs(5), attached.from_controller.message())
        .await
        .context("the stream stayed open")?;
    ensure!(
        !matches!(ended, Ok(Some(_))),
        "a frame after stopping: {ended:?}"
    );
    let holder = leases
        .get(&lease_name)
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    ensure!(
        holder.as_deref() == Some("thief"),
        "the old leader wrote the Lease: {holder:?}"
    );
    let _ = leases.delete(&lease_name, &DeleteParams::default()).await;
    Ok(())
}
