//! An ImagePrePullJob on real edge nodes (issue 36, docs/fleet.md "Jobs"): two edges, each in
//! a network namespace of its own with a Docker engine of its own, and the kit's registry
//! (CNCF distribution, TLS, a login) holding a pushed image. Edge B is offline when the job is
//! created: edge A pulls the image with the job's pull Secret and reports it; B's task waits
//! (its node is `InProgress`, the job too) and reaches B from its inventory resync when B
//! returns; then the job is `Complated`, both engines hold the image, and a pod using it
//! starts on B without a pull.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Secret};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verge_e2e::{Cloud, Edge, create_namespace, operations_job, via_host, wait_for, wait_running};
use verge_testkit::netns::EdgeNetns;
use verge_testkit::netns_docker::NetnsDocker;
use verge_testkit::registry::Registry;
use verge_testkit::wait::wait_node_ready;

struct NetnsEdge {
    edge: Edge,
    docker: NetnsDocker,
    netns: EdgeNetns,
}

fn netns_edge(
    cloud: &Cloud,
    index: u8,
    name: &str,
    dir: &std::path::Path,
) -> anyhow::Result<NetnsEdge> {
    let netns = EdgeNetns::create(index)?;
    let docker = NetnsDocker::start(&netns, &dir.join(name))?;
    // The pod sandbox's image; the job's image comes from the registry only.
    docker.load_image(verge_testkit::docker::TEST_IMAGE)?;
    let endpoint = docker.endpoint();
    let mut edge = Edge::with_config(name, cloud, |c| {
        via_host(c, cloud, netns.host_addr());
        c.edged.container_runtime_endpoint = Some(endpoint);
    })?;
    edge.start_in(&netns)?;
    Ok(NetnsEdge {
        edge,
        docker,
        netns,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prepull_reaches_an_offline_node_when_it_returns() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    verge_testkit::packages::ensure_debian_packages(&["iproute2", "nftables"])?;
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_fleetcontroller(&cp).await?;
    let dir = tempfile::tempdir()?;
    let id = std::process::id();
    let (a, b) = (format!("e2e-prepull-a-{id}"), format!("e2e-prepull-b-{id}"));
    let mut edges = vec![
        netns_edge(&cloud, 40, &a, dir.path())?,
        netns_edge(&cloud, 41, &b, dir.path())?,
    ];
    // The registry on the host side of A's link; B's namespace routes that host address
    // through its own link (a namespace has a route to its link only).
    let registry_ip = edges[0].netns.host_addr();
    let registry = Registry::start_on(registry_ip).await?;
    let route = edges[1]
        .netns
        .command(std::path::Path::new("ip"))
        .args(["route", "add", &format!("{registry_ip}/32"), "via"])
        .arg(edges[1].netns.host_addr().to_string())
        .status()?;
    ensure!(
        route.success(),
        "ip route add {registry_ip} in B's namespace"
    );
    let pushed = registry
        .push(
            verge_testkit::docker::TEST_IMAGE,
            &format!("verge-e2e/prepull:{id}"),
        )
        .await?;
    let ns = format!("e2e-prepull-{id}");
    let result = scenario(&client, &ns, &mut edges, &registry, &pushed.reference).await;
    let logs: String = edges
        .iter()
        .map(|e| {
            format!(
                "--- {} ---\n{}\n{}",
                e.edge.name,
                e.edge.logs(40),
                e.docker.log_tail()
            )
        })
        .collect();
    let logs = format!(
        "{}\n{logs}\n--- registry ---\n{}",
        cloud.logs(40),
        registry.log()
    );
    let jobs: Api<DynamicObject> =
        Api::all_with(client.clone(), &operations_job("ImagePrePullJob"));
    let _ = jobs
        .delete(&format!("prepull-{id}"), &DeleteParams::default())
        .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for e in &mut edges {
        let _ = e.edge.kill9();
        let _ = nodes.delete(&e.edge.name, &DeleteParams::default()).await;
    }
    drop(edges);
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

async fn scenario(
    client: &Client,
    ns: &str,
    edges: &mut [NetnsEdge],
    registry: &Registry,
    image: &str,
) -> anyhow::Result<()> {
    let id = std::process::id();
    for e in edges.iter() {
        wait_node_ready(client, &e.edge.name, Duration::from_secs(90)).await?;
    }
    let (a, b) = (edges[0].edge.name.clone(), edges[1].edge.name.clone());
    // The engines do not hold the image: the job must pull it.
    for e in edges.iter() {
        ensure!(
            e.docker.docker(&["image", "inspect", image]).is_err(),
            "{image} already on {}",
            e.edge.name
        );
    }
    create_namespace(client, ns).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &registry.pull_secret("registry-login"),
        )
        .await?;
    edges[1].edge.kill9()?;

    let jobs: Api<DynamicObject> =
        Api::all_with(client.clone(), &operations_job("ImagePrePullJob"));
    let name = format!("prepull-{id}");
    let job = json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name},
        "spec": {"imagePrePullTemplate": {"images": [image], "nodeNames": [a, b],
                 "imageSecrets": format!("{ns}/registry-login"), "concurrency": 2,
                 "retryTimes": 1, "timeoutSeconds": 120}}});
    let created = Instant::now();
    jobs.patch(&name, &PatchParams::apply("verge-e2e"), &Patch::Apply(&job))
        .await?;
    let entry = |status: &Value, node: &str| -> Value {
        status["nodeStatus"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["nodeName"] == node).cloned())
            .unwrap_or(Value::Null)
    };
    let status = wait_for("A pulled, B waits", Duration::from_secs(120), || async {
        let status = jobs.get(&name).await?.data["status"].clone();
        Ok((entry(&status, &a)["phase"] == "Successful").then_some(status))
    })
    .await?;
    ensure!(
        status["phase"] == "InProgress" && entry(&status, &b)["phase"] == "InProgress",
        "while B is offline: {status}"
    );
    ensure!(
        entry(&status, &a)["imageStatus"] == json!([{"image": image, "status": "True"}]),
        "A's images: {status}"
    );
    edges[0]
        .docker
        .docker(&["image", "inspect", image])
        .context("the image on A")?;

    let returned = created.elapsed();
    let returning = &mut edges[1];
    returning.edge.start_in(&returning.netns)?;
    let status = wait_for("the job Complated", Duration::from_secs(120), || async {
        let status = jobs.get(&name).await?.data["status"].clone();
        Ok((status["phase"] == "Complated").then_some(status))
    })
    .await?;
    let elapsed = created.elapsed();
    ensure!(entry(&status, &b)["phase"] == "Successful", "B: {status}");
    let b_entry = entry(&status, &b);
    let flow: Vec<&str> = b_entry["actionFlow"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["action"].as_str())
        .collect();
    ensure!(flow == ["Check", "Pull"], "B's steps: {status}");
    edges[1]
        .docker
        .docker(&["image", "inspect", image])
        .context("the image on B")?;
    eprintln!(
        "prepull job on two nodes: A done and B back {returned:?} after creation, \
         the job done {elapsed:?} after creation"
    );

    // A pod using the image starts on B without a pull.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "prepulled"},
        "spec": {"nodeName": b, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    wait_running(&pods, "prepulled", Duration::from_secs(90)).await?;
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default().fields("involvedObject.name=prepulled"))
        .await?
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    ensure!(
        !reasons.iter().any(|r| r == "Pulling"),
        "the pod pulled: {reasons:?}"
    );
    ensure!(
        reasons.iter().any(|r| r == "Pulled"),
        "no Pulled event: {reasons:?}"
    );
    Ok(())
}
