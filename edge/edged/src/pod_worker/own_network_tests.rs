//! Pods without a sandbox against the fake runtime: a pod of one container on the pod network
//! runs as that one container, which holds the pod's hostname, ports and address, and keeps
//! the address across its restarts; an ephemeral container joins it.

use serde_json::json;
use verge_container_runtime::labels;
use verge_container_runtime::types::{IpcMode, NetworkMode};

use super::observe::RunState;
use super::tests::{IMAGE, app_pod, harness, pod, pod_network, settle, with_debugger};

#[tokio::test(start_paused = true)]
async fn a_pod_of_one_container_runs_without_a_sandbox_and_keeps_its_ip_across_restarts() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let net = pod_network(&h).await;
    h.rt.exit_on_start("app", 1);
    let mut p = app_pod("Always");
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].ports = Some(vec![
            serde_json::from_value(json!({"containerPort": 80, "hostPort": 8080})).expect("port"),
        ]);
    }
    let mut w = h.worker(&p);
    settle(&mut w).await;
    // The first restart after the first exit is immediate.
    w.sync().await.expect("sync");
    assert!(
        h.rt.instances(labels::SANDBOX_NAME).is_empty(),
        "no sandbox"
    );
    let instances = h.rt.instances("app");
    assert_eq!(instances.len(), 2, "restarted once");
    let ip = instances[0]
        .spec
        .ipv4_address
        .clone()
        .expect("a fixed address");
    assert!(net.contains(ip.parse().expect("ipv4")), "{ip}");
    for i in &instances {
        assert_eq!(
            i.spec.ipv4_address.as_deref(),
            Some(ip.as_str()),
            "the same IP"
        );
        assert_eq!(i.spec.labels.get(labels::POD_IP), Some(&ip));
        assert_eq!(i.spec.network, NetworkMode::Network(net.name().to_owned()));
        assert_eq!(i.spec.hostname.as_deref(), Some("web"));
        assert_eq!(i.spec.ipc, IpcMode::Shareable);
        assert_eq!(i.spec.port_bindings["80/tcp"][0].host_port, "8080");
    }
    let status = w.last_status.clone().expect("status");
    assert_eq!(status.pod_ip.as_deref(), Some(ip.as_str()));

    // Another pod gets another address.
    h.rt.run_on_start("app");
    let mut other = app_pod("Always");
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("u-2".into());
    let mut w2 = h.worker(&other);
    settle(&mut w2).await;
    let other_ip = w2.last_status.clone().and_then(|s| s.pod_ip);
    assert!(other_ip.is_some_and(|o| o != ip), "a second address");
}

#[tokio::test(start_paused = true)]
async fn pods_of_several_containers_and_pods_off_the_pod_network_keep_a_sandbox() {
    let h = harness();
    h.rt.add_image(IMAGE);
    // Docker's default bridge takes no fixed address: a sandbox.
    let mut w = h.worker(&app_pod("Always"));
    settle(&mut w).await;
    assert_eq!(h.rt.instances(labels::SANDBOX_NAME).len(), 1);

    pod_network(&h).await;
    let mut init = pod(json!({"initContainers": [{"name": "init", "image": IMAGE}],
        "containers": [{"name": "main", "image": IMAGE}]}));
    init.metadata.uid = Some("u-2".into());
    let mut w = h.worker(&init);
    settle(&mut w).await;
    let sandboxes = h.rt.instances(labels::SANDBOX_NAME);
    assert_eq!(
        sandboxes.len(),
        2,
        "a pod with an init container has a sandbox"
    );
    // The pod that started with a sandbox goes on with it on the pod network too.
    let mut w = h.worker(&app_pod("Always"));
    settle(&mut w).await;
    assert_eq!(h.rt.instances(labels::SANDBOX_NAME).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_joins_the_container_of_a_pod_without_a_sandbox() {
    let h = harness();
    h.rt.add_image(IMAGE);
    pod_network(&h).await;
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    w.pod = std::sync::Arc::new(with_debugger(&p));
    settle(&mut w).await;
    let debugger = h.rt.instances("debugger").pop().expect("started");
    assert_eq!(debugger.info.state, RunState::Running);
    let joined = NetworkMode::Container(app.info.id.clone());
    assert_eq!(debugger.spec.network, joined);
    assert_eq!(debugger.spec.ipc, IpcMode::Container(app.info.id));
    assert_eq!(debugger.spec.labels.get(labels::POD_IP), None);
}

#[tokio::test(start_paused = true)]
async fn an_address_held_outside_the_pods_is_given_up_for_another() {
    use verge_container_runtime::{ContainerRuntime as _, ContainerSpec};
    let h = harness();
    h.rt.add_image(IMAGE);
    let net = pod_network(&h).await;
    // A container started on the pod network by hand, at the first pod address.
    let blocker = ContainerSpec {
        image: IMAGE.into(),
        network: NetworkMode::Network(net.name().to_owned()),
        ipv4_address: Some("10.244.9.2".into()),
        ..ContainerSpec::default()
    };
    let id = h.rt.create("blocker", blocker).await.expect("create");
    h.rt.start(&id).await.expect("start");
    let mut w = h.worker(&app_pod("Always"));
    settle(&mut w).await;
    assert!(
        h.rt.instances("app").is_empty(),
        "the first start was refused and its container removed"
    );
    // The retry after the start back-off takes another address.
    tokio::time::advance(std::time::Duration::from_secs(11)).await;
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("started");
    assert_eq!(app.info.state, RunState::Running);
    assert_eq!(app.spec.ipv4_address.as_deref(), Some("10.244.9.3"));
    let status = w.last_status.clone().expect("status");
    assert_eq!(status.pod_ip.as_deref(), Some("10.244.9.3"));
}

/// A hostNetwork pod does not wait for the pod network (the kubelet syncs hostNetwork pods
/// while its network is not ready): its sandbox joins the host's network.
#[tokio::test(start_paused = true)]
async fn a_host_network_pod_starts_while_the_pod_network_is_undecided() {
    let h = harness();
    h.rt.add_image(IMAGE);
    h.network
        .send_replace(crate::network::NetworkState::AwaitingPodCidr);
    let p = pod(json!({"hostNetwork": true,
        "containers": [{"name": "app", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let sandbox = h.rt.instances(labels::SANDBOX_NAME).pop().expect("sandbox");
    assert_eq!(sandbox.spec.network, NetworkMode::Host);
    let status = w.last_status.clone().expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
}
