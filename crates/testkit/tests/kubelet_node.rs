//! The kit's kubelet node runs pods of a locally imported image; from a pod the `kubernetes`
//! Service reaches the API server (whose TLS the pod's CA verifies and which authenticates
//! the pod's projected service-account token), a ClusterIP Service answers from a pod and
//! from the host, and stopping the node leaves nothing.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use verge_testkit::docker::TEST_IMAGE;
use verge_testkit::wait::{create_namespace, wait_for};
use verge_testkit::{KubeletNode, KubeletNodeConfig};

/// A pod of the test image running `script` with `sh -c`, labelled `app=<name>`.
/// It runs as deploy/cloud's services do: non-root (65532), read-only root filesystem (an
/// `emptyDir` at `/data`), no capabilities or privilege escalation, the runtime's default
/// seccomp profile.
fn pod(name: &str, script: &str, restart: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "main",
                "image": TEST_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "securityContext": {
                    "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }))?)
}

/// Waits until the pod's phase is one of `phases`; returns it.
async fn wait_phase(pods: &Api<Pod>, name: &str, phases: &[&str]) -> anyhow::Result<String> {
    wait_for(
        &format!("pod {name} {phases:?}"),
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get(name).await?;
                let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
                Ok(phases.contains(&phase.as_str()).then_some(phase))
            }
        },
    )
    .await
}

/// `GET / HTTP/1.0` to `addr`; the whole response.
async fn http_get(addr: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}

#[tokio::test]
async fn kubelet_node_runs_pods_serves_services_and_leaves_nothing() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    let started = Instant::now();
    let node = KubeletNode::start(&cp).await?;
    let ready = started.elapsed();
    let result = exercise(&cp, &node).await.map_err(|e| {
        let tail = |c: &str| verge_testkit::process::log_tail(&node.log_path(c), 40);
        e.context(format!(
            "kubelet log tail:\n{}\ncontainerd log tail:\n{}",
            tail("kubelet"),
            tail("containerd")
        ))
    });
    let stopping = Instant::now();
    node.clone().stop().await?;
    eprintln!(
        "kubelet node: start to Ready {ready:.1?}, stop {:.1?}",
        stopping.elapsed()
    );
    result?;

    let client = cp.client().await?;
    let nodes: Api<Node> = Api::all(client);
    assert!(
        nodes.get_opt(node.name()).await?.is_none(),
        "the Node object is deleted"
    );
    let left = KubeletNodeConfig::from_env().leftovers();
    assert!(left.is_empty(), "left on the host: {left:#?}");

    crash_then_start_again(&cp).await
}

/// A node whose processes die with a pod running (a crashed test run) is cleaned up by the
/// next start; `down` without a handle leaves nothing either.
async fn crash_then_start_again(cp: &verge_testkit::ControlPlane) -> anyhow::Result<()> {
    let node = KubeletNode::start(cp).await?;
    let client = cp.client().await?;
    let ns = format!("kubelet-node-crash-{}", std::process::id());
    let outcome = async {
        // A fresh node's containerd holds only the pause image.
        let import = node.clone();
        tokio::task::spawn_blocking(move || import.import_image(TEST_IMAGE)).await??;
        create_namespace(&client, &ns).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let sleeper = pod("sleeper", "exec sleep 3600", "Always")?;
        pods.create(&PostParams::default(), &sleeper).await?;
        wait_phase(&pods, "sleeper", &["Running"]).await?;
        for (_, pid) in node.pids() {
            std::process::Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status()?;
        }
        let t = Instant::now();
        KubeletNode::start(cp).await?;
        eprintln!(
            "kubelet node: start after a crash to Ready {:.1?}",
            t.elapsed()
        );

        // One node per host: a node of another run directory is refused while this runs.
        let other = KubeletNodeConfig {
            run_dir: std::env::temp_dir().join(format!("verge-other-node-{}", std::process::id())),
            ..KubeletNodeConfig::from_env()
        };
        let refused = other
            .up(cp)
            .await
            .map(|_| ())
            .expect_err("a second node is refused");
        let mine = KubeletNodeConfig::from_env().run_dir;
        anyhow::ensure!(
            format!("{refused:#}").contains(&mine.display().to_string()),
            "the refusal names the running node's run directory: {refused:#}"
        );
        anyhow::Ok(())
    }
    .await;
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    KubeletNodeConfig::from_env().down().await?;
    outcome?;
    let left = KubeletNodeConfig::from_env().leftovers();
    assert!(left.is_empty(), "left on the host after down: {left:#?}");
    Ok(())
}

/// The user name the API server at `server` sees for the token and CA a probe pod printed
/// (`TOKEN=<jwt>` then the CA PEM).
async fn in_cluster_user(logs: &str, server: &str) -> anyhow::Result<String> {
    let token = logs
        .lines()
        .find_map(|l| l.strip_prefix("TOKEN="))
        .ok_or_else(|| anyhow::anyhow!("no token in {logs}"))?;
    let ca = &logs[logs
        .find("-----BEGIN CERTIFICATE-----")
        .ok_or_else(|| anyhow::anyhow!("no CA in {logs}"))?..];
    let dir = tempfile::tempdir()?;
    let ca_path = dir.path().join("ca.crt");
    std::fs::write(&ca_path, ca)?;
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": {
            "server": server, "certificate-authority": ca_path}}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "in-cluster", "user": "pod"}}],
        "current-context": "pod",
    });
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig.to_string())?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review: SelfSubjectReview = serde_json::from_value(serde_json::json!({}))?;
    let review = reviews.create(&PostParams::default(), &review).await?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .ok_or_else(|| anyhow::anyhow!("SelfSubjectReview without a user name"))
}

/// Pods, Services and the API from a pod, on a started node.
async fn exercise(cp: &verge_testkit::ControlPlane, node: &KubeletNode) -> anyhow::Result<()> {
    let client = cp.client().await?;
    let t = Instant::now();
    let import = node.clone();
    tokio::task::spawn_blocking(move || import.import_image(TEST_IMAGE)).await??;
    eprintln!("kubelet node: {TEST_IMAGE} imported in {:.1?}", t.elapsed());

    let ns = format!("kubelet-node-{}", std::process::id());
    create_namespace(&client, &ns).await?;
    let outcome = async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let pp = PostParams::default();

        let t = Instant::now();
        let web = "echo hello-from-pod > /data/index.html && exec httpd -f -p 8080 -h /data";
        pods.create(&pp, &pod("web", web, "Always")?).await?;
        wait_phase(&pods, "web", &["Running"]).await?;
        eprintln!("kubelet node: pod running {:.1?} after create", t.elapsed());

        // `kubectl exec` (the API server streams through the kubelet, on the node IP).
        let out = cp
            .kubectl_command()
            .args(["exec", "-n", &ns, "web", "--", "cat", "/data/index.html"])
            .output()?;
        anyhow::ensure!(
            String::from_utf8_lossy(&out.stdout).contains("hello-from-pod"),
            "kubectl exec: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }))?;
        let svc = services.create(&pp, &svc).await?;
        let ip = svc
            .spec
            .and_then(|s| s.cluster_ip)
            .ok_or_else(|| anyhow::anyhow!("service without a ClusterIP"))?;

        // From the host, through kube-proxy's rules (as edgecore reaches cloudhub's Service).
        let addr = format!("{ip}:80");
        let body = wait_for(
            "the ClusterIP from the host",
            Duration::from_secs(30),
            || {
                let addr = addr.clone();
                async move {
                    Ok(http_get(&addr)
                        .await
                        .ok()
                        .filter(|b| b.contains("hello-from-pod")))
                }
            },
        )
        .await?;
        anyhow::ensure!(body.contains("200 OK"), "from the ClusterIP: {body}");

        // From a pod: the API server through the `kubernetes` Service (a TLS answer:
        // busybox's TLS cannot complete a handshake with an ECDSA certificate, the
        // server's alert is the answer), the ClusterIP Service, and the pod's in-cluster
        // credentials, which the host then uses below.
        let probe = format!(
            "set -e; sa=/var/run/secrets/kubernetes.io/serviceaccount; \
             wget -q -O /dev/null https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/ \
               2>/data/err || grep -q 'TLS error from peer' /data/err; echo API_TLS_OK; \
             wget -q -O - http://{ip}/; \
             echo TOKEN=$(cat $sa/token); cat $sa/ca.crt"
        );
        pods.create(&pp, &pod("probe", &probe, "Never")?).await?;
        let phase = wait_phase(&pods, "probe", &["Succeeded", "Failed"]).await?;
        let logs = pods.logs("probe", &LogParams::default()).await?;
        anyhow::ensure!(phase == "Succeeded", "probe {phase}; log: {logs}");
        for want in ["API_TLS_OK", "hello-from-pod"] {
            anyhow::ensure!(logs.contains(want), "probe log lacks {want}: {logs}");
        }

        // The pod's in-cluster configuration, used from the host: the CA verifies the API
        // server and the projected token authenticates as the pod's service account. To the
        // API server's own address, not 10.96.0.1: on this shared host an edge node's Service
        // rules (each edgecore programs the host it runs on, as kube-proxy does) may take the
        // host's own connections to cluster IPs; the pod above used 10.96.0.1.
        let user = in_cluster_user(&logs, cp.server_url()).await?;
        anyhow::ensure!(
            user == format!("system:serviceaccount:{ns}:default"),
            "the pod's token authenticates as {user}"
        );
        anyhow::Ok(())
    }
    .await;
    let namespaces: Api<Namespace> = Api::all(client);
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    outcome
}
