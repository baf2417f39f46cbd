use verge_container_runtime::fake::FakeRuntime;
use verge_container_runtime::labels::{ContainerLabels, PodRef};
use verge_container_runtime::{ContainerRuntime as _, ContainerSpec, StreamingRuntime as _};

use super::*;
use crate::fixture::Tree;

/// Starts container `name` of pod `ns/web` (uid `u-1`; `POD` is the sandbox) and writes its
/// cgroup v2 files: `cpu_usec` of CPU, `current` bytes of memory, `inactive` of them
/// inactive file pages. Returns its id.
async fn start(
    runtime: &FakeRuntime,
    tree: &Tree,
    name: &str,
    cpu_usec: u64,
    current: u64,
) -> String {
    let labels = ContainerLabels {
        pod: PodRef {
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u-1".into(),
        },
        container: name.into(),
        restart_count: 0,
        sandbox: name == labels::SANDBOX_NAME,
        pod_ip: None,
    };
    let spec = ContainerSpec {
        image: "busybox".into(),
        labels: labels.to_map(),
        ..ContainerSpec::default()
    };
    let id = runtime
        .create(&labels.docker_name(), spec)
        .await
        .expect("created");
    runtime.start(&id).await.expect("started");
    let pid = runtime
        .process_id(&id)
        .await
        .expect("pid")
        .expect("running");
    tree.write(&format!("proc/{pid}/cgroup"), &format!("0::/docker/{id}\n"))
        .write(
            &format!("proc/{pid}/net/dev"),
            "Inter-|\n face |\n  eth0: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n",
        )
        .write(
            &format!("cgroup/docker/{id}/cpu.stat"),
            &format!("usage_usec {cpu_usec}\n"),
        )
        .write(
            &format!("cgroup/docker/{id}/memory.current"),
            &format!("{current}\n"),
        )
        .write(
            &format!("cgroup/docker/{id}/memory.stat"),
            "inactive_file 1000\nanon 500\n",
        );
    id
}

fn node_tree() -> Tree {
    let tree = Tree::new();
    tree.write("cgroup/cgroup.controllers", "cpu memory\n")
        .write("cgroup/cpu.stat", "usage_usec 5000000\n")
        .write(
            "proc/meminfo",
            "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 500 kB\nInactive(file): 100 kB\nAnonPages: 300 kB\n",
        )
        .write("proc/vmstat", "pgfault 1\npgmajfault 0\n")
        .write("proc/stat", "cpu 1 0 1 10 0 0 0 0\nbtime 1700000000\n")
        .write("proc/net/dev", "Inter-|\n face |\n  eth0: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n");
    tree
}

#[tokio::test]
async fn a_round_reads_each_running_container_and_sums_the_pod() {
    let tree = node_tree();
    let runtime = FakeRuntime::new("node-1");
    runtime.add_image("busybox");
    start(&runtime, &tree, labels::SANDBOX_NAME, 10, 2000).await;
    let app = start(&runtime, &tree, "app", 3_000_000, 11_000).await;
    let stopped = start(&runtime, &tree, "side", 1, 1000).await;
    runtime.exit(&stopped, 0);
    let collector = Collector::new(runtime.clone(), tree.fs(), "node-1");

    let first = collector.snapshot().await;
    assert!(!first.scrape_error, "{first:?}");
    assert_eq!(first.node.name, "node-1");
    assert_eq!(first.node.start_time.timestamp(), 1_700_000_000);
    let node = first.node.usage.expect("node usage");
    assert_eq!(node.cpu_usage_nanos, 5_000_000_000);
    let [pod] = first.pods.as_slice() else {
        panic!("one pod: {:?}", first.pods);
    };
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
        ("ns", "web", "u-1")
    );
    // Only the running app container; the sandbox is the pod's, not a container.
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app"]);
    let usage = pod.containers[0].usage.expect("container usage");
    assert_eq!(usage.cpu_usage_nanos, 3_000_000_000);
    assert_eq!(usage.memory.working_set_bytes, 10_000);
    assert_eq!(usage.usage_nano_cores, None, "no rate on the first round");
    // The pod: app + sandbox.
    let sum = pod.usage.expect("pod usage");
    assert_eq!(sum.cpu_usage_nanos, 3_000_010_000);
    assert_eq!(sum.memory.working_set_bytes, 10_000 + 1000);
    let interfaces = &pod.network.as_ref().expect("pod network").value;
    assert_eq!(interfaces[0].rx_bytes, 100);

    // A second round after the counter moved: a rate; a container gone is forgotten.
    tree.write(
        &format!("cgroup/docker/{app}/cpu.stat"),
        "usage_usec 4000000\n",
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = collector.snapshot().await;
    let rate = second.pods[0].containers[0]
        .usage
        .and_then(|u| u.usage_nano_cores)
        .expect("a rate");
    assert!(rate > 0, "{rate}");
    runtime.exit(&app, 0);
    let third = collector.snapshot().await;
    assert!(third.pods[0].containers.is_empty(), "{:?}", third.pods);
    assert!(!third.scrape_error);
}

#[tokio::test]
async fn an_unreadable_cgroup_is_a_scrape_error_not_a_failure() {
    let tree = node_tree();
    let runtime = FakeRuntime::new("node-1");
    runtime.add_image("busybox");
    let id = start(&runtime, &tree, "app", 1, 1).await;
    std::fs::remove_dir_all(tree.path(&format!("cgroup/docker/{id}"))).expect("rm");
    let snapshot = Collector::new(runtime, tree.fs(), "node-1")
        .snapshot()
        .await;
    assert!(snapshot.scrape_error);
    assert!(snapshot.node.usage.is_some());
    assert_eq!(snapshot.pods[0].containers[0].usage, None);
}
