//! Pods on the edge, end to end: kubectl-style objects in the real API server, scheduled
//! by the real kube-scheduler, run by edgecore on the real Docker engine.
//!
//! Each test starts its own cloudhub, edgecontroller and edgecore (a unique node name) and
//! its own namespace; pods are pinned to that node with a nodeSelector.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, docker, wait_for};

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;

/// Each scenario starts its own cloud services and edgecore and creates containers; they run
/// one at a time so the time bounds of the acceptance checks hold on a 2-core CI machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    client: Client,
    cloud: Cloud,
    edge: Edge,
    ns: String,
    /// Released last, after the edge's containers are gone.
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    async fn new(tag: &str) -> anyhow::Result<Self> {
        verge_telemetry::init_for_tests();
        let serial = SERIAL.lock().await;
        let cp = verge_testkit::shared().await?;
        let client = cp.client().await?;
        let cloud = Cloud::start(&cp).await?;
        let name = format!("e2e-{tag}-{}", std::process::id());
        let mut edge = Edge::new(&name, &cloud)?;
        edge.start()?;
        verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
        let ns = name.clone();
        create_namespace(&client, &ns).await?;
        Ok(Self {
            client,
            cloud,
            edge,
            ns,
            _serial: serial,
        })
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn logs(&self) -> String {
        format!(
            "{}\n--- edgecore ---\n{}",
            self.cloud.logs(30),
            self.edge.logs(60)
        )
    }

    /// A pod spec pinned to this edge node, from a JSON `spec` fragment.
    fn pod(&self, name: &str, mut spec: serde_json::Value) -> anyhow::Result<Pod> {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": self.edge.name});
        spec["terminationGracePeriodSeconds"] = json!(2);
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": spec,
        }))?)
    }

    async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        f: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let pods = self.pods();
        let r = wait_for(what, timeout, || {
            let pods = pods.clone();
            let f = &f;
            async move { Ok(pods.get_opt(name).await?.filter(|p| f(p))) }
        })
        .await;
        match r {
            Ok(p) => Ok(p),
            Err(e) => {
                let pod = self.pods().get_opt(name).await.ok().flatten();
                let status = pod
                    .and_then(|p| p.status)
                    .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default());
                anyhow::bail!(
                    "{e:#}\npod status: {}\n{}",
                    status.unwrap_or_default(),
                    self.logs()
                )
            }
        }
    }

    async fn cleanup(self) {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        for id in
            containers_with(&[("io.kubernetes.pod.namespace", &self.ns)], true).unwrap_or_default()
        {
            let _ = docker(&["rm", "-f", &id]);
        }
    }
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container_status<'a>(
    p: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

fn waiting_reason(p: &Pod, name: &str) -> Option<String> {
    container_status(p, name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn app_container(p: &Pod, name: &str) -> anyhow::Result<String> {
    let uid = p.metadata.uid.clone().unwrap_or_default();
    containers_with(
        &[
            ("io.kubernetes.pod.uid", &uid),
            ("io.kubernetes.container.name", name),
        ],
        false,
    )?
    .into_iter()
    .next()
    .ok_or_else(|| anyhow::anyhow!("no running container {name} for pod uid {uid}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn deployment_runs_and_scales_to_zero() -> anyhow::Result<()> {
    let s = Setup::new("deploy").await?;
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": s.edge.name},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "httpd", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                        "command": ["httpd", "-f", "-p", "8080"],
                        "ports": [{"containerPort": 8080}]
                    }]
                }
            }
        }
    }))?;
    let started = Instant::now();
    deployments.create(&PostParams::default(), &d).await?;
    let pods = s.pods();
    let lp = ListParams::default().labels("app=web");
    // Running and Ready (`kubectl get pods`: 1/1 Running), within the acceptance's 30 s.
    let r = wait_for("3 pods Running and Ready", Duration::from_secs(30), || {
        let pods = pods.clone();
        let lp = lp.clone();
        async move {
            let list = pods.list(&lp).await?;
            let running = list
                .items
                .iter()
                .filter(|p| phase(p) == "Running" && pod_ready(p))
                .count();
            Ok((running == 3).then_some(list))
        }
    })
    .await;
    let list = match r {
        Ok(l) => l,
        Err(e) => anyhow::bail!("{e:#}\n{}", s.logs()),
    };
    eprintln!(
        "3 replicas Running and Ready {:?} after create",
        started.elapsed()
    );
    for p in &list.items {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(s.edge.name.as_str())
        );
        let id = app_container(p, "httpd")?;
        let labels = docker(&["inspect", "-f", "{{json .Config.Labels}}", &id])?;
        let labels: serde_json::Value = serde_json::from_str(&labels)?;
        assert_eq!(labels["io.kubernetes.pod.namespace"], json!(s.ns));
        assert_eq!(labels["io.kubernetes.pod.name"], json!(p.metadata.name));
        assert_eq!(labels["io.kubernetes.pod.uid"], json!(p.metadata.uid));
        assert_eq!(labels["io.kubernetes.container.name"], json!("httpd"));
        let status = p.status.as_ref().expect("status");
        assert!(status.pod_ip.is_some(), "podIP reported");
        let cs = container_status(p, "httpd").expect("container status");
        assert!(
            cs.ready
                && cs
                    .container_id
                    .as_deref()
                    .is_some_and(|c| c.starts_with("docker://"))
        );
    }

    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    let ns = s.ns.clone();
    let r = wait_for(
        "no pod and no container left after scale to 0",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let ns = ns.clone();
            async move {
                let left = pods.list(&ListParams::default()).await?.items.len();
                let containers =
                    containers_with(&[("io.kubernetes.pod.namespace", &ns)], true)?.len();
                Ok((left == 0 && containers == 0).then_some(()))
            }
        },
    )
    .await;
    if let Err(e) = r {
        anyhow::bail!("{e:#}\n{}", s.logs());
    }
    s.cleanup().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn configmap_file_and_secret_env() -> anyhow::Result<()> {
    let s = Setup::new("cfg").await?;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "settings"}, "data": {"greeting": "hello"}
        }))?,
    )
    .await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(s.client.clone(), &s.ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}
            }))?,
        )
        .await?;
    let pod = s.pod("reader", json!({
        "containers": [{
            "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "3600"],
            "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]
        }],
        "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]
    }))?;
    s.pods().create(&PostParams::default(), &pod).await?;
    let p = s
        .wait_pod("reader", "pod Running", Duration::from_secs(30), |p| {
            phase(p) == "Running"
        })
        .await?;
    let id = app_container(&p, "main")?;
    assert_eq!(docker(&["exec", &id, "cat", "/etc/cfg/greeting"])?, "hello");
    assert_eq!(
        docker(&["exec", &id, "sh", "-c", "echo $PASSWORD"])?,
        "s3cr3t"
    );
    // The kubelet's service variables: the master service of `default`, always.
    let master = docker(&[
        "exec",
        &id,
        "sh",
        "-c",
        "echo $KUBERNETES_SERVICE_PORT_HTTPS",
    ])?;
    assert!(
        !master.is_empty(),
        "KUBERNETES_SERVICE_PORT_HTTPS unset\n{}",
        s.logs()
    );

    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "bonjour"}})),
    )
    .await?;
    let changed = Instant::now();
    let r = wait_for(
        "mounted configmap file updated",
        Duration::from_secs(60),
        || {
            let id = id.clone();
            async move {
                Ok(
                    (docker(&["exec", &id, "cat", "/etc/cfg/greeting"])? == "bonjour")
                        .then_some(()),
                )
            }
        },
    )
    .await;
    if let Err(e) = r {
        anyhow::bail!("{e:#}\n{}", s.logs());
    }
    eprintln!(
        "configmap change visible in the container after {:?}",
        changed.elapsed()
    );
    s.cleanup().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn liveness_restart_and_crash_loop_backoff() -> anyhow::Result<()> {
    let s = Setup::new("probe").await?;
    let live = s.pod(
        "unhealthy",
        json!({
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                                  "periodSeconds": 1, "failureThreshold": 1}
            }]
        }),
    )?;
    let crash = s.pod(
        "crasher",
        json!({
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "exit 1"]}]
        }),
    )?;
    s.pods().create(&PostParams::default(), &live).await?;
    s.pods().create(&PostParams::default(), &crash).await?;

    s.wait_pod(
        "unhealthy",
        "liveness restart raises restartCount",
        Duration::from_secs(60),
        |p| container_status(p, "main").is_some_and(|c| c.restart_count >= 1),
    )
    .await?;

    // CrashLoopBackOff with growing delays: note when restartCount changes.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut backoff_reason = false;
    while Instant::now() < deadline && seen.len() < 3 {
        if let Some(p) = s.pods().get_opt("crasher").await? {
            backoff_reason |= waiting_reason(&p, "main").as_deref() == Some("CrashLoopBackOff");
            if let Some(c) = container_status(&p, "main")
                && seen.last().map(|(n, _)| *n) != Some(c.restart_count)
            {
                seen.push((c.restart_count, Instant::now()));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(backoff_reason, "reason CrashLoopBackOff seen\n{}", s.logs());
    assert!(
        seen.len() >= 3,
        "restartCount changed at least twice: {seen:?}\n{}",
        s.logs()
    );
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].1 - w[0].1).collect();
    eprintln!("crash-loop restart gaps: {gaps:?}");
    assert!(
        gaps[gaps.len() - 1] > gaps[gaps.len() - 2],
        "delays grow: {gaps:?}"
    );
    s.cleanup().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn init_container_output_in_empty_dir() -> anyhow::Result<()> {
    let s = Setup::new("init").await?;
    let pod = s.pod(
        "init",
        json!({
            "initContainers": [{"name": "prepare", "image": IMAGE, "imagePullPolicy": "Never",
                                "command": ["sh", "-c", "echo prepared > /work/msg"],
                                "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "volumeMounts": [{"name": "work", "mountPath": "/data"}]}],
            "volumes": [{"name": "work", "emptyDir": {}}]
        }),
    )?;
    s.pods().create(&PostParams::default(), &pod).await?;
    let p = s
        .wait_pod(
            "init",
            "pod Running after init",
            Duration::from_secs(30),
            |p| phase(p) == "Running",
        )
        .await?;
    let id = app_container(&p, "main")?;
    assert_eq!(docker(&["exec", &id, "cat", "/data/msg"])?, "prepared");
    s.cleanup().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_pod_and_never_pull_missing_image() -> anyhow::Result<()> {
    let s = Setup::new("del").await?;
    let pod = s.pod("victim", json!({
        "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]
    }))?;
    let missing = s.pod("missing", json!({
        "containers": [{"name": "main", "image": "verge-test/does-not-exist:1", "imagePullPolicy": "Never"}]
    }))?;
    s.pods().create(&PostParams::default(), &pod).await?;
    s.pods().create(&PostParams::default(), &missing).await?;
    let p = s
        .wait_pod("victim", "pod Running", Duration::from_secs(30), |p| {
            phase(p) == "Running"
        })
        .await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    s.wait_pod(
        "missing",
        "ErrImageNeverPull",
        Duration::from_secs(30),
        |p| waiting_reason(p, "main").as_deref() == Some("ErrImageNeverPull"),
    )
    .await?;

    s.pods().delete("victim", &DeleteParams::default()).await?;
    let pods = s.pods();
    let r = wait_for(
        "containers removed and pod object deleted",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let uid = uid.clone();
            async move {
                let containers = containers_with(&[("io.kubernetes.pod.uid", &uid)], true)?.len();
                let gone = pods.get_opt("victim").await?.is_none();
                Ok((containers == 0 && gone).then_some(()))
            }
        },
    )
    .await;
    if let Err(e) = r {
        anyhow::bail!("{e:#}\n{}", s.logs());
    }
    // The edge survived the bad image.
    assert!(s.edge.process.as_ref().is_some(), "edgecore still tracked");
    s.cleanup().await;
    Ok(())
}
