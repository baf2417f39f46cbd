//! The kubelet's read endpoints of an edge node through the API server's node proxy (issue
//! 34): `kubectl get --raw /api/v1/nodes/<edge>/proxy/...` reaches edgecore as it reaches a
//! kubelet. The edge advertises its stream address as `Hostname` (an IPv6 literal the API
//! server's proxyable-host check accepts), the API server dials it through its egress
//! selector (the kit's streams front, a cloudhub), and the cloudhub holding the session
//! tunnels it to edgecore, which serves `/healthz`, `/pods`, `/metrics`, `/metrics/probes`,
//! `/metrics/resource` and `/stats/summary` from cgroups and `/proc`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, docker, wait_for};
use verge_testkit::ControlPlane;

/// One cloud and edge at a time (each scenario runs containers).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    cp: ControlPlane,
    cloud: Cloud,
    edge: Edge,
    ns: String,
    pods: Api<Pod>,
}

impl Setup {
    async fn new(tag: &str) -> anyhow::Result<Self> {
        verge_telemetry::init_for_tests();
        let cp = verge_testkit::shared().await?;
        let client = cp.client().await?;
        let cloud = Cloud::start(&cp).await?;
        let name = format!("e2e-{tag}-{}", std::process::id());
        let mut edge = Edge::new(&name, &cloud)?;
        edge.start()?;
        verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
        create_namespace(&client, &name).await?;
        Ok(Self {
            pods: Api::namespaced(client, &name),
            cp,
            cloud,
            edge,
            ns: name,
        })
    }

    /// `kubectl get --raw /api/v1/nodes/<edge>/proxy/<path>`: (success, stdout, stderr).
    fn proxy(&self, path: &str) -> anyhow::Result<(bool, String, String)> {
        let url = format!("/api/v1/nodes/{}/proxy/{path}", self.edge.name);
        let out = self
            .cp
            .kubectl_command()
            .args(["get", "--raw", &url])
            .output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// `proxy(path)`'s output once it succeeds and `ready` holds for it (20 s at most).
    async fn proxy_until(
        &self,
        path: &str,
        ready: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        wait_for(
            &format!("node proxy {path}"),
            Duration::from_secs(20),
            || async {
                let (ok, out, err) = self.proxy(path)?;
                if !ok {
                    eprintln!("proxy {path}: {err}");
                }
                Ok((ok && ready(&out)).then_some(out))
            },
        )
        .await
    }

    fn logs(&self) -> String {
        format!(
            "{}\n--- edgecore ---\n{}\n--- streams front ---\n{}",
            self.cloud.logs(30),
            self.edge.logs(40),
            verge_testkit::process::log_tail(&self.cp.log_path("streams-front"), 30)
        )
    }

    async fn cleanup(self) {
        let client = self.pods.clone().into_client();
        let namespaces: Api<Namespace> = Api::all(client);
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        for id in
            containers_with(&[("io.kubernetes.pod.namespace", &self.ns)], true).unwrap_or_default()
        {
            let _ = docker(&["rm", "-f", &id]);
        }
    }
}

#[tokio::test]
async fn the_node_proxy_reaches_an_edge_nodes_kubelet_endpoints() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let s = Setup::new("nproxy").await?;
    let result = proxy_scenario(&s).await;
    if result.is_err() {
        eprintln!("{}", s.logs());
    }
    s.cleanup().await;
    result
}

async fn proxy_scenario(s: &Setup) -> anyhow::Result<()> {
    // A pod with a readiness probe (for /metrics/probes) that holds some memory, and an
    // emptyDir its init container filled with 1 MiB (for the summary's volumes).
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sleeper", "namespace": s.ns},
        "spec": {"nodeName": s.edge.name, "terminationGracePeriodSeconds": 1,
                 "volumes": [{"name": "scratch", "emptyDir": {}}],
                 "initContainers": [{"name": "fill", "image": verge_testkit::docker::TEST_IMAGE,
                                     "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "head -c 1048576 /dev/urandom > /scratch/f"],
                                     "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                 "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", "head -c 8m /dev/zero > /dev/shm/held; sleep 3600"],
                                 "readinessProbe": {"exec": {"command": ["true"]},
                                                    "periodSeconds": 1}}]}
    }))?;
    s.pods.create(&PostParams::default(), &pod).await?;
    verge_e2e::wait_running(&s.pods, "sleeper", Duration::from_secs(60)).await?;

    let started = Instant::now();
    let health = s.proxy_until("healthz", |out| out == "ok").await?;
    eprintln!("first node proxy answer after {:?}", started.elapsed());
    assert_eq!(health, "ok");

    let pods: Value = serde_json::from_str(&s.proxy_until("pods", |_| true).await?)?;
    assert_eq!(pods["kind"], "PodList", "{pods}");
    let names: Vec<&str> = pods["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(names.contains(&"sleeper"), "{names:?}");

    let summary = s
        .proxy_until("stats/summary", |out| out.contains("\"sleeper\""))
        .await?;
    let summary: Value = serde_json::from_str(&summary)?;
    let node = &summary["node"];
    assert_eq!(node["nodeName"], s.edge.name.as_str(), "{node}");
    assert!(
        node["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0),
        "{node}"
    );
    assert!(
        node["memory"]["workingSetBytes"].as_u64() > Some(0),
        "{node}"
    );
    let pod = summary["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["podRef"]["name"] == "sleeper"))
        .ok_or_else(|| anyhow::anyhow!("no sleeper in {summary}"))?;
    assert_eq!(pod["podRef"]["namespace"], s.ns.as_str());
    let main = &pod["containers"][0];
    assert_eq!(main["name"], "main", "{pod}");
    assert!(
        main["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0),
        "{pod}"
    );
    // The 8 MiB in /dev/shm are the container's (shmem is charged to its memory cgroup).
    let working_set = main["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
    assert!(
        working_set >= 8 << 20,
        "working set {working_set} < 8 MiB: {pod}"
    );
    assert!(pod["network"]["interfaces"].is_array(), "{pod}");
    let scratch = pod["volume"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "scratch"))
        .ok_or_else(|| anyhow::anyhow!("no scratch volume in {pod}"))?;
    let used = scratch["usedBytes"].as_u64().unwrap_or(0);
    assert!(used >= 1 << 20, "the volume's 1 MiB is counted: {scratch}");
    assert!(scratch["capacityBytes"].as_u64() > Some(used), "{scratch}");

    let resource = s
        .proxy_until("metrics/resource", |out| out.contains("pod=\"sleeper\""))
        .await?;
    for needle in [
        "# TYPE container_cpu_usage_seconds_total counter",
        &format!(
            "container_memory_working_set_bytes{{container=\"main\",namespace=\"{}\",pod=\"sleeper\"}} ",
            s.ns
        ),
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "resource_scrape_error 0",
    ] {
        assert!(
            resource.contains(needle),
            "{needle:?} missing from\n{resource}"
        );
    }

    let probes = s
        .proxy_until("metrics/probes", |out| out.contains("pod=\"sleeper\""))
        .await?;
    assert!(
        probes.contains(
            "prober_probe_total{probe_type=\"Readiness\",result=\"successful\",container=\"main\""
        ),
        "{probes}"
    );
    let own = s.proxy_until("metrics", |_| true).await?;
    assert!(own.contains("verge_edgecore_"), "{own}");
    Ok(())
}

#[tokio::test]
async fn the_node_proxy_of_an_offline_edge_fails_fast_naming_it() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let mut s = Setup::new("nproxy-off").await?;
    let result = offline_scenario(&mut s).await;
    if result.is_err() {
        eprintln!("{}", s.logs());
    }
    s.cleanup().await;
    result
}

async fn offline_scenario(s: &mut Setup) -> anyhow::Result<()> {
    s.proxy_until("healthz", |out| out == "ok").await?;
    s.edge.kill9()?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let (ok, _, err) = s.proxy("stats/summary")?;
    let took = started.elapsed();
    assert!(!ok, "a scrape of an offline node failed");
    assert!(
        err.contains(&format!("edge node {} is offline", s.edge.name)),
        "the error names the node offline: {err}"
    );
    assert!(took < Duration::from_secs(5), "failed within 5 s: {took:?}");
    Ok(())
}
