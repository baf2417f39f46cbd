//! kubectl streams to edge pods (issue 14): the real kube-apiserver dials the edge node's
//! kubelet endpoint through its egress selector (the kit's streams front, a cloudhub) to the
//! cloudhub holding the node's session, over the session to edgecore, which serves the
//! kubelet API on Docker. Nothing listens on the edge for it.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
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

    /// Creates a pod on the edge whose one container `main` runs `script` and waits until
    /// it runs.
    async fn pod(&self, name: &str, script: &str) -> anyhow::Result<()> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"nodeName": self.edge.name, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                     "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", script]}]}
        }))?;
        self.pods.create(&PostParams::default(), &pod).await?;
        verge_e2e::wait_running(&self.pods, name, Duration::from_secs(60)).await?;
        Ok(())
    }

    /// `kubectl <args>` in the test namespace: (exit success, stdout, stderr).
    fn kubectl(&self, args: &[&str]) -> anyhow::Result<(bool, String, String)> {
        let out = self
            .cp
            .kubectl_command()
            .args(["-n", &self.ns])
            .args(args)
            .output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
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
async fn kubectl_logs_of_an_edge_pod_come_through_cloudhub() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let s = Setup::new("logs").await?;
    let result = logs_scenario(&s).await;
    if result.is_err() {
        eprintln!("{}", s.logs());
    }
    s.cleanup().await;
    result
}

async fn logs_scenario(s: &Setup) -> anyhow::Result<()> {
    s.pod(
        "talker",
        "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done",
    )
    .await?;
    // The container's output, through the API server, the front, cloudhub and the tunnel.
    let started = Instant::now();
    let logs = wait_for("kubectl logs talker", Duration::from_secs(20), || async {
        let (ok, out, err) = s.kubectl(&["logs", "talker"])?;
        if !ok {
            eprintln!("kubectl logs: {err}");
        }
        Ok((ok && out.contains("line 1")).then_some(out))
    })
    .await?;
    eprintln!("first kubectl logs after {:?}", started.elapsed());
    assert!(logs.starts_with("line 0\n"), "{logs}");
    // --tail and --timestamps are the kubelet's.
    let (ok, tail, err) = s.kubectl(&["logs", "talker", "--tail=1", "--timestamps"])?;
    assert!(ok, "{err}");
    let line = tail.trim_end();
    assert_eq!(tail.lines().count(), 1, "{tail}");
    let (stamp, text) = line.split_once(' ').expect("a timestamp and a line");
    assert!(text.starts_with("line "), "{line}");
    assert_eq!(
        stamp.len(),
        "2006-01-02T15:04:05.000000000Z".len(),
        "{stamp}"
    );
    // -f: a new line arrives within a second of being written (one every 200 ms).
    let mut follow =
        s.cp.kubectl_command()
            .args(["-n", &s.ns, "logs", "-f", "--tail=1", "talker"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
    let stdout = follow.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let (first_at, first) = rx.recv_timeout(Duration::from_secs(15))?;
    let (next_at, next) = rx.recv_timeout(Duration::from_secs(1))?;
    let _ = follow.kill();
    let (first, next) = (first?, next?);
    assert_ne!(first, next);
    assert!(next_at - first_at < Duration::from_secs(1));
    // --previous: the output of the instance before the last restart.
    let restarter: Pod = serde_json::from_value(json!({
        "metadata": {"name": "restarter", "namespace": s.ns},
        "spec": {"nodeName": s.edge.name, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"]}]}
    }))?;
    s.pods.create(&PostParams::default(), &restarter).await?;
    wait_for("restarter restarted", Duration::from_secs(60), || async {
        let pod = s.pods.get("restarter").await?;
        Ok(pod
            .status
            .and_then(|st| st.container_statuses)
            .and_then(|c| c.first().map(|c| c.restart_count))
            .filter(|count| *count >= 1)
            .map(|_| ()))
    })
    .await?;
    let (ok, previous, err) = s.kubectl(&["logs", "restarter", "--previous"])?;
    assert!(ok, "{err}");
    assert!(previous.starts_with("run-"), "{previous}");
    let current = wait_for(
        "the current instance's output",
        Duration::from_secs(20),
        || async {
            let (ok, out, _) = s.kubectl(&["logs", "restarter"])?;
            Ok((ok && out.starts_with("run-")).then_some(out))
        },
    )
    .await?;
    assert_ne!(previous, current, "two instances, two outputs");
    // Unknown containers get the kubelet's 404.
    let (ok, _, err) = s.kubectl(&["logs", "talker", "-c", "nope"])?;
    assert!(!ok);
    assert!(
        err.contains("container nope is not valid") || err.contains("not found"),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_logs_of_an_offline_edge_fail_fast_naming_the_node() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let mut s = Setup::new("offline").await?;
    let result = offline_scenario(&mut s).await;
    if result.is_err() {
        eprintln!("{}", s.logs());
    }
    s.cleanup().await;
    result
}

async fn offline_scenario(s: &mut Setup) -> anyhow::Result<()> {
    s.pod("quiet", "echo hello; sleep 3600").await?;
    wait_for("kubectl logs quiet", Duration::from_secs(20), || async {
        let (ok, out, _) = s.kubectl(&["logs", "quiet"])?;
        Ok((ok && out == "hello\n").then_some(()))
    })
    .await?;
    // The link is gone: edgecore is killed, its session ends, the pod keeps running.
    s.edge.kill9()?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let (ok, _, err) = s.kubectl(&["logs", "quiet"])?;
    let took = started.elapsed();
    assert!(!ok, "kubectl logs of an offline node failed");
    assert!(
        err.contains(&format!("edge node {} is offline", s.edge.name)),
        "the error names the node offline: {err}"
    );
    assert!(took < Duration::from_secs(5), "failed within 5 s: {took:?}");
    Ok(())
}

#[tokio::test]
async fn kubectl_streams_reach_edges_on_either_cloudhub_replica() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start_replicas(&cp, 2).await?;
    let hub1 = cloud.second_replica()?;
    let pid = std::process::id();
    let ns = format!("e2e-streams-rep-{pid}");
    let mut edges = Vec::new();
    for (i, name) in [format!("e2e-srep-a-{pid}"), format!("e2e-srep-b-{pid}")]
        .into_iter()
        .enumerate()
    {
        let mut edge = Edge::with_config(&name, &cloud, |c| {
            if i == 1 {
                hub1.serve(c);
            }
        })?;
        edge.start()?;
        edges.push(edge);
    }
    create_namespace(&client, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let result = async {
        for (i, edge) in edges.iter().enumerate() {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("p{i}"), "namespace": ns},
                "spec": {"nodeName": edge.name, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main",
                                         "image": verge_testkit::docker::TEST_IMAGE,
                                         "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", format!("echo from {}; {WEB}", edge.name)]}]}
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
        }
        for (i, edge) in edges.iter().enumerate() {
            let name = format!("p{i}");
            verge_e2e::wait_running(&pods, &name, Duration::from_secs(60)).await?;
            let expected = format!("from {}\n", edge.name);
            wait_for(&format!("kubectl logs {name}"), Duration::from_secs(20), || async {
                let out = cp.kubectl_command().args(["-n", &ns, "logs", &name]).output()?;
                Ok((String::from_utf8_lossy(&out.stdout) == expected).then_some(()))
            })
            .await?;
            exec_checks(&cp, &ns, &name).await?;
        }
        anyhow::Ok(())
    }
    .await;
    if result.is_err() {
        eprintln!(
            "{}\n--- edge a ---\n{}\n--- edge b ---\n{}",
            cloud.logs(30),
            edges[0].logs(30),
            edges[1].logs(30)
        );
    }
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    for id in containers_with(&[("io.kubernetes.pod.namespace", &ns)], true).unwrap_or_default() {
        let _ = docker(&["rm", "-f", &id]);
    }
    result
}

#[tokio::test]
async fn kubectl_exec_port_forward_and_cp_reach_an_edge_pod() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let s = Setup::new("exec").await?;
    let result = async {
        s.pod("web", WEB).await?;
        exec_checks(&s.cp, &s.ns, "web").await
    }
    .await;
    if result.is_err() {
        eprintln!("{}", s.logs());
    }
    s.cleanup().await;
    result
}

/// A pod script: an HTTP server on port 8080 serving `served-from-the-edge`.
const WEB: &str = "mkdir -p /tmp/www && echo served-from-the-edge > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www";

/// `kubectl exec` (exit code, stdin, an interactive shell in tmux), `port-forward` to
/// [`WEB`]'s server and `cp` both ways, on pod `pod` of namespace `ns`.
async fn exec_checks(cp: &ControlPlane, ns: &str, pod: &str) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(|| verge_testkit::packages::ensure_debian_packages(&["tmux"]))
        .await??;
    let kubectl = |args: &[&str]| -> anyhow::Result<(bool, String)> {
        let out = cp.kubectl_command().args(["-n", ns]).args(args).output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    // The exit code of the command is kubectl's.
    let out = cp
        .kubectl_command()
        .args(["-n", ns, "exec", pod, "--", "sh", "-c", "exit 3"])
        .output()?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stdin reaches the process, and its end ends it.
    let mut cat = cp
        .kubectl_command()
        .args(["-n", ns, "exec", "-i", pod, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    {
        use std::io::Write as _;
        let mut stdin = cat.stdin.take().expect("piped");
        stdin.write_all(b"echoed through the tunnel\n")?;
    }
    let out = cat.wait_with_output()?;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echoed through the tunnel\n"
    );
    // An interactive shell in a terminal.
    let session = format!("verge-exec-{pod}-{}", std::process::id());
    let kubeconfig = cp.kubeconfig();
    let shell = format!(
        "KUBECONFIG={} {} -n {} exec -it {} -- sh",
        kubeconfig.display(),
        cp.kubectl().display(),
        ns,
        pod
    );
    let tmux = |args: &[&str]| Command::new("tmux").args(args).output();
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "30",
        &shell,
    ])?;
    let interactive = wait_for(
        "the shell answers in tmux",
        Duration::from_secs(20),
        || async {
            let _ = tmux(&["send-keys", "-t", &session, "echo answer-$((6*7))", "Enter"]);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let pane = tmux(&["capture-pane", "-p", "-t", &session])?;
            Ok(String::from_utf8_lossy(&pane.stdout)
                .contains("answer-42")
                .then_some(()))
        },
    )
    .await;
    let _ = tmux(&["kill-session", "-t", &session]);
    interactive?;
    // port-forward to the pod's HTTP server.
    let port = verge_testkit::ports::free_port()?;
    let mut forward = cp
        .kubectl_command()
        .args([
            "-n",
            ns,
            "port-forward",
            &format!("pod/{pod}"),
            &format!("{port}:8080"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let body = wait_for(
        "an answer through port-forward",
        Duration::from_secs(20),
        || async {
            Ok(http_get(port)
                .ok()
                .filter(|b| b.contains("served-from-the-edge")))
        },
    )
    .await;
    let _ = forward.kill();
    body?;
    // cp in and out (tar over exec).
    let dir = tempfile::tempdir()?;
    let local = dir.path().join("in.txt");
    std::fs::write(&local, "copied to the edge and back\n")?;
    let remote = format!("{pod}:/tmp/copied.txt");
    let (ok, err) = kubectl(&["cp", &local.display().to_string(), &remote])?;
    assert!(ok, "kubectl cp in: {err}");
    let back = dir.path().join("back.txt");
    let (ok, err) = kubectl(&["cp", &remote, &back.display().to_string()])?;
    assert!(ok, "kubectl cp out: {err}");
    assert_eq!(
        std::fs::read_to_string(back)?,
        "copied to the edge and back\n"
    );
    Ok(())
}

/// `GET /` on 127.0.0.1:`port`; the response (head and body).
fn http_get(port: u16) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}
