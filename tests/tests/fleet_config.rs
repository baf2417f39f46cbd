//! A ConfigUpdateJob on a real edge node (issue 36, docs/fleet.md "Jobs"): fleetcontroller and
//! an edgecore started from a configuration file, with a pod running. A job setting
//! `edged.maxPods` to a value edgecore's parser refuses fails naming the field and changes
//! nothing (the file, the process); a valid one is written, edgecore restarts in place with it,
//! confirms once connected (the Node's pod capacity follows), the pod's container is never
//! re-created, and the value survives a later restart of edgecore.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, job_actions, operations_job, sleeper_pod,
    wait_for, wait_job_final, wait_running,
};
use verge_testkit::wait::wait_node_ready;

#[tokio::test(flavor = "multi_thread")]
async fn a_config_update_is_checked_applied_and_kept() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_fleetcontroller(&cp).await?;
    let name = format!("e2e-config-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    let result = scenario(&client, &mut edge).await;
    let logs = format!("{}\n--- edge ---\n{}", cloud.logs(40), edge.logs(60));
    let jobs: Api<DynamicObject> =
        Api::all_with(client.clone(), &operations_job("ConfigUpdateJob"));
    for job in ["bad", "good"] {
        let _ = jobs
            .delete(&format!("{name}-{job}"), &DeleteParams::default())
            .await;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
    let _ = edge.kill9();
    let _ = verge_e2e::remove_managed_containers(|n| n == name);
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

async fn pod_capacity(nodes: &Api<Node>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(nodes
        .get_opt(name)
        .await?
        .and_then(|n| n.status)
        .and_then(|s| s.capacity)
        .and_then(|c| c.get("pods").map(|q| q.0.clone())))
}

async fn scenario(client: &Client, edge: &mut Edge) -> anyhow::Result<()> {
    let name = edge.name.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_node_ready(client, &name, Duration::from_secs(60)).await?;
    create_namespace(client, &name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
    pods.create(
        &PostParams::default(),
        &sleeper_pod(&name, "keeps-running", &name)?,
    )
    .await?;
    let pod = wait_running(&pods, "keeps-running", Duration::from_secs(90)).await?;
    let uid = pod.metadata.uid.unwrap_or_default();
    let containers = || {
        containers_with(
            &[
                ("io.kubernetes.pod.uid", uid.as_str()),
                ("io.kubernetes.container.name", "main"),
            ],
            false,
        )
    };
    let before = containers()?;
    ensure!(before.len() == 1, "the pod's container: {before:?}");
    let config_before = std::fs::read_to_string(edge.config_path())?;
    let pid = edge
        .process
        .as_ref()
        .map(verge_testkit::process::ChildProcess::pid);

    let jobs: Api<DynamicObject> =
        Api::all_with(client.clone(), &operations_job("ConfigUpdateJob"));
    let create = async |job: &str, value: &str| -> anyhow::Result<String> {
        let job_name = format!("{name}-{job}");
        let object = json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ConfigUpdateJob",
            "metadata": {"name": job_name},
            "spec": {"nodeNames": [name], "timeoutSeconds": 60,
                     "updateFields": {"edged.maxPods": value}}});
        jobs.patch(
            &job_name,
            &PatchParams::apply("verge-e2e"),
            &Patch::Apply(&object),
        )
        .await?;
        Ok(job_name)
    };
    let finished = async |job_name: &str| -> anyhow::Result<Value> {
        wait_job_final(&jobs, job_name, Duration::from_secs(120), || Ok(())).await
    };

    // A value edgecore's parser refuses: the job fails naming the field; nothing changed.
    let bad = create("bad", "many").await?;
    let status = finished(&bad).await?;
    let entry = status["nodeStatus"][0].clone();
    ensure!(
        status["phase"] == "Failure"
            && entry["phase"] == "Failure"
            && entry["reason"]
                .as_str()
                .is_some_and(|r| r.contains("maxPods")),
        "the bad job: {status}"
    );
    ensure!(
        std::fs::read_to_string(edge.config_path())? == config_before,
        "the file changed"
    );
    ensure!(
        edge.process
            .as_ref()
            .map(verge_testkit::process::ChildProcess::pid)
            == pid
            && edge.process.as_mut().is_some_and(|p| p.is_running()),
        "edgecore restarted for a refused change"
    );

    // A valid one: applied, edgecore restarts in place and confirms.
    let good = create("good", "57").await?;
    let status = finished(&good).await?;
    let entry = status["nodeStatus"][0].clone();
    ensure!(
        status["phase"] == "Complated"
            && entry["phase"] == "Successful"
            && job_actions(&entry) == ["Check", "BackUp", "Update"],
        "the good job: {status}"
    );
    let config_after = std::fs::read_to_string(edge.config_path())?;
    ensure!(
        config_after.contains("maxPods: 57"),
        "the file: {config_after}"
    );
    wait_for(
        "the node's pod capacity 57",
        Duration::from_secs(60),
        || async {
            Ok((pod_capacity(&nodes, &name).await?.as_deref() == Some("57")).then_some(()))
        },
    )
    .await?;
    ensure!(
        containers()? == before,
        "the pod's container was re-created"
    );

    // It survives a restart of edgecore.
    edge.kill9()?;
    edge.start()?;
    wait_node_ready(client, &name, Duration::from_secs(60)).await?;
    ensure!(
        std::fs::read_to_string(edge.config_path())? == config_after,
        "the file after a restart"
    );
    ensure!(
        pod_capacity(&nodes, &name).await?.as_deref() == Some("57"),
        "the capacity after a restart"
    );
    ensure!(
        containers()? == before,
        "the pod's container after a restart"
    );
    Ok(())
}
