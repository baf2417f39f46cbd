use super::*;
use verge_container_runtime::fake::FakeRuntime;

#[tokio::test]
async fn the_state_follows_the_node_object() {
    let runtime = FakeRuntime::new("n");
    assert_eq!(state_for(&runtime, "n", None).await, NetworkState::Unknown);
    assert_eq!(
        state_for(&runtime, "n", Some(None)).await,
        NetworkState::DefaultBridge
    );
    let ready = state_for(&runtime, "n", Some(Some("10.244.7.0/24".into()))).await;
    let NetworkState::Ready(net) = &ready else {
        panic!("{ready:?}");
    };
    assert_eq!(runtime.networks()[net.name()].gateway, "10.244.7.1");
    assert!(ready.sandbox_network().is_ok());
    let failed = state_for(&runtime, "n", Some(Some("10.244.7.9/24".into()))).await;
    assert!(matches!(failed, NetworkState::Failed(ref r) if r.contains("host bits")));
    assert!(NetworkState::Unknown.sandbox_network().is_err());
}

#[test]
fn a_new_node_has_the_rest_of_the_pod_cidr_grace() {
    let now = Timestamp::from_second(1_000).expect("time");
    let at = |s| Some(Timestamp::from_second(s).expect("time"));
    assert_eq!(
        remaining_grace(at(990), now),
        POD_CIDR_GRACE - Duration::from_secs(10)
    );
    assert_eq!(remaining_grace(at(100), now), Duration::ZERO);
    assert_eq!(
        remaining_grace(at(2_000), now),
        POD_CIDR_GRACE,
        "clock behind"
    );
    assert_eq!(remaining_grace(None, now), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_new_node_waits_for_its_pod_cidr_before_the_default_bridge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("s.redb")).expect("open");
    let key = ResourceKey::cluster(ResourceType::Node, "n");
    let node = |rv: &str, cidr: Option<&str>| {
        let created = verge_edge_store::clock::now();
        let spec = cidr.map_or_else(String::new, |c| format!(r#","spec":{{"podCIDR":"{c}"}}"#));
        let json =
            format!(r#"{{"metadata":{{"name":"n","creationTimestamp":"{created}"}}{spec}}}"#);
        store
            .upsert_if_newer(&key, "u", rv, json.as_bytes())
            .expect("store");
    };
    let (events_tx, events) = broadcast::channel(4);
    let (tx, mut rx) = watch::channel(NetworkState::Unknown);
    let shutdown = CancellationToken::new();
    node("1", None);
    let task = tokio::spawn(run(
        FakeRuntime::new("n"),
        store.clone(),
        "n".to_owned(),
        events,
        tx,
        shutdown.clone(),
    ));
    let next = async |rx: &mut watch::Receiver<NetworkState>| {
        rx.changed().await.expect("running");
        rx.borrow_and_update().clone()
    };
    assert_eq!(next(&mut rx).await, NetworkState::AwaitingPodCidr);
    let waited = Instant::now();
    assert_eq!(next(&mut rx).await, NetworkState::DefaultBridge);
    assert!(waited.elapsed() >= POD_CIDR_GRACE - Duration::from_secs(1));
    node("2", Some("10.244.7.0/24"));
    let event = StoreEvent {
        key: key.clone(),
        uid: "u".into(),
        applied: verge_metamanager::Applied::Stored,
        trace: verge_core::TraceContext::default(),
    };
    events_tx.send(event).expect("sent");
    assert!(matches!(next(&mut rx).await, NetworkState::Ready(_)));
    shutdown.cancel();
    task.await.expect("run");
}

#[tokio::test]
async fn pod_ips_are_read_back_from_the_containers_labels_and_old_sandboxes() {
    use verge_container_runtime::labels::{ContainerLabels, PodRef};
    use verge_container_runtime::types::NetworkMode;
    use verge_container_runtime::{ContainerRuntime as _, ContainerSpec};
    let runtime = FakeRuntime::new("n");
    runtime.add_image("img");
    let net = verge_edge_net::PodNetwork::new("n", "10.244.7.0/24").expect("cidr");
    net.ensure(&runtime).await.expect("network");
    let container = |uid: &str, sandbox: bool, ip: Option<&str>| {
        let labels = ContainerLabels {
            pod: PodRef {
                namespace: "ns".into(),
                name: uid.into(),
                uid: uid.into(),
            },
            container: if sandbox { "POD" } else { "app" }.into(),
            restart_count: 0,
            sandbox,
            pod_ip: ip.map(str::to_owned),
        };
        ContainerSpec {
            image: "img".into(),
            labels: labels.to_map(),
            network: NetworkMode::Network(net.name().to_owned()),
            ipv4_address: ip.map(str::to_owned),
            ..ContainerSpec::default()
        }
    };
    // A pod without a sandbox whose container is stopped (crash-loop back-off).
    let own = runtime
        .create("own", container("u-own", false, Some("10.244.7.9")))
        .await
        .expect("create");
    runtime.exit(&own, 1);
    // A sandbox an earlier edgecore made, at an address of the engine's.
    let old = runtime
        .create("old", container("u-old", true, None))
        .await
        .expect("create");
    runtime.start(&old).await.expect("start");
    let engine_given = runtime
        .inspect(&old)
        .await
        .expect("inspect")
        .and_then(|i| i.ip)
        .expect("an address");
    let ips = seed_pod_ips(&runtime).await;
    assert_eq!(
        ips.get("u-own").map(|ip| ip.to_string()),
        Some("10.244.7.9".into())
    );
    assert_eq!(
        ips.get("u-old").map(|ip| ip.to_string()),
        Some(engine_given)
    );
}
