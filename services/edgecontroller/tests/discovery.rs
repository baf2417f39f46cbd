//! cloudhub replicas found through the Kubernetes API: a selector-less Service and
//! hand-made EndpointSlices (as the EndpointSlice controller would write them for cloudhub
//! pods) point at two in-test ControllerHubs on loopback; the controller attaches to both,
//! verifies them for `<service>.<namespace>.svc`, and detaches from one that turns not
//! ready or whose slice is deleted (real API server, verge-testkit).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use verge_edgecontroller::Config;

use common::{Attach, Controller};

/// The Service's name.
const SERVICE: &str = "hubs";

#[tokio::test]
async fn attaches_to_ready_endpoints_of_the_service() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let ns = format!("ec-disc-{id}");
    let server_name = format!("{SERVICE}.{ns}.svc");
    // EndpointSlices may not name loopback addresses: the hubs listen on the address the kit
    // gave its own link (the API server's advertise address), never a real network's.
    let ip = IpAddr::V4(cp.advertise_address());
    let (addr1, mut hub1) = common::start_on(ip, &[&server_name]).await?;
    let (addr2, mut hub2) = common::start_on(ip, &[&server_name]).await?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pp = PostParams::default();
    namespaces
        .create(
            &pp,
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    let election = common::leader_election(&client, "disc").await?;
    let config = Config {
        cloudhub_service: Some(format!("{ns}/{SERVICE}")),
        cloudhub_auth: common::hub_auth(),
        leader_election: election.clone(),
        reconnect_min_backoff: Duration::from_millis(100),
        reconnect_max_backoff: Duration::from_millis(500),
        ..Config::default()
    };
    let controller = Controller::spawn(config, client.clone());
    let result = tokio::time::timeout(
        Duration::from_secs(120),
        scenario(&client, &ns, (addr1, &mut hub1), (addr2, &mut hub2)),
    )
    .await
    .context("scenario timed out")
    .and_then(|r| r);
    controller.stop().await?;
    common::delete_lease(&client, &election).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn scenario(
    client: &kube::Client,
    ns: &str,
    (addr1, hub1): (SocketAddr, &mut mpsc::Receiver<Attach>),
    (addr2, hub2): (SocketAddr, &mut mpsc::Receiver<Attach>),
) -> anyhow::Result<()> {
    let pp = PostParams::default();
    // A Service without selector: its EndpointSlices are written by hand.
    let service = json!({ "metadata": { "name": SERVICE },
        "spec": { "ports": [{ "name": "controllerhub", "port": 10001 }] } });
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&pp, &serde_json::from_value(service)?)
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    for (name, addr) in [("hubs-a", addr1), ("hubs-b", addr2)] {
        slices.create(&pp, &slice(name, addr, true)?).await?;
    }
    // A slice of another Service is not looked at.
    slices
        .create(&pp, &slice_of("other-a", "other", addr1, true)?)
        .await?;

    let (mut a, hello) = common::next_hello(hub1).await?;
    ensure!(hello.name == "edgecontroller");
    let (mut b, _) = common::next_hello(hub2).await?;

    // hubs-b's endpoint turns not ready (its pod terminates): detached, and not again.
    slices
        .patch(
            "hubs-b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "endpoints": [{ "addresses": [addr2.ip().to_string()],
                "conditions": { "ready": false, "terminating": true } }] }),
            ),
        )
        .await?;
    ensure_ended(&mut b, "not ready").await?;
    ensure!(
        tokio::time::timeout(Duration::from_secs(2), hub2.recv())
            .await
            .is_err(),
        "re-attached to a not-ready endpoint"
    );
    // hubs-a's slice is deleted: detached too.
    slices.delete("hubs-a", &DeleteParams::default()).await?;
    ensure_ended(&mut a, "deleted").await?;
    // hubs-b becomes ready again: attached again.
    slices
        .patch(
            "hubs-b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "endpoints": [{ "addresses": [addr2.ip().to_string()],
                "conditions": { "ready": true } }] }),
            ),
        )
        .await?;
    common::next_hello(hub2).await?;
    ensure!(
        tokio::time::timeout(Duration::from_secs(2), hub1.recv())
            .await
            .is_err(),
        "attached to the other Service's endpoint"
    );
    Ok(())
}

/// Fails unless `attach`'s stream from the controller ends within 10 s.
async fn ensure_ended(attach: &mut Attach, why: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, attach.from_controller.message()).await {
            Err(_) => anyhow::bail!("still attached to an endpoint that is {why}"),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None) | Err(_)) => return Ok(()),
        }
    }
}

/// An EndpointSlice of [`SERVICE`] with one endpoint at `addr`.
fn slice(name: &str, addr: SocketAddr, ready: bool) -> anyhow::Result<EndpointSlice> {
    slice_of(name, SERVICE, addr, ready)
}

/// An EndpointSlice of `service` with one endpoint at `addr` (its port named
/// `controllerhub`).
fn slice_of(
    name: &str,
    service: &str,
    addr: SocketAddr,
    ready: bool,
) -> anyhow::Result<EndpointSlice> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/service-name": service } },
        "addressType": "IPv4",
        "ports": [{ "name": "controllerhub", "port": addr.port(), "protocol": "TCP" }],
        "endpoints": [{ "addresses": [addr.ip().to_string()], "conditions": { "ready": ready } }]
    }))?)
}
