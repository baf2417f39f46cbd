//! Real-Docker tests of edged's probes (exec, httpGet, tcpSocket) and of container and image
//! garbage collection. Containers and images get unique names and are removed by guards.
//! Setup uses the `docker` CLI; the code under test uses edged's Docker runtime. HTTPS and gRPC probes are
//! tested without Docker in `probes_tls_grpc.rs`.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ExecAction, HTTPGetAction, HTTPHeader, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use verge_edgecore::container_runtime::DockerRuntime;
use verge_edgecore::edged::gc::{GarbageCollector, GcConfig};
use verge_edgecore::edged::probe::{
    DockerProber, ProbeHandler, ProbeKind, ProbeManager, ProbeTarget,
};
use verge_testkit::docker::{TEST_IMAGE, ensure_docker, ensure_test_image};

const BOUND: Duration = Duration::from_secs(90);

/// Runs `docker args…`, returning trimmed stdout.
fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .context("running docker")?;
    if !out.status.success() {
        bail!(
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Removes containers and images (by reference) when dropped.
#[derive(Default)]
struct Cleanup {
    containers: Vec<String>,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", "-v", c]);
        }
        for i in &self.images {
            let _ = docker(&["rmi", i]);
        }
    }
}

fn setup() -> Result<DockerRuntime> {
    ensure_docker()?;
    ensure_test_image()?;
    Ok(DockerRuntime::local("verge-probes-gc")?)
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn exec_probe(cmd: &str) -> Probe {
    let command = Some(vec!["sh".into(), "-c".into(), cmd.into()]);
    Probe {
        exec: Some(ExecAction { command }),
        ..Probe::default()
    }
}

#[tokio::test]
async fn exec_http_and_tcp_probes_against_a_real_container() -> Result<()> {
    let docker_api = setup()?;
    let mut cleanup = Cleanup::default();
    let name = unique("verge-probe");
    let id = docker(&[
        "run", "-d", "--name", &name, TEST_IMAGE, "httpd", "-f", "-p", "8080", "-h", "/etc",
    ])?;
    cleanup.containers.push(id.clone());
    let ip = docker(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id])?;
    ensure!(!ip.is_empty(), "container has no bridge IP");
    let target = ProbeTarget {
        namespace: "default".into(),
        pod: "p".into(),
        pod_uid: unique("uid"),
        container: "web".into(),
        container_id: id,
        pod_ip: Some(ip),
    };
    let ports = vec![ContainerPort {
        name: Some("http".into()),
        container_port: 8080,
        ..ContainerPort::default()
    }];
    let container = Container {
        name: "web".into(),
        ports: Some(ports),
        ..Container::default()
    };
    let prober = DockerProber::new(docker_api.clone());
    let run = |probe: Probe| {
        let (prober, target, container) = (prober.clone(), target.clone(), container.clone());
        async move {
            let fut = prober.run(ProbeKind::Liveness, &target, &container, &probe);
            tokio::time::timeout(BOUND, fut).await.context("probe hung")
        }
    };

    ensure!(run(exec_probe("exit 0")).await?.success);
    let failed = run(exec_probe("echo boom; exit 3")).await?;
    ensure!(
        !failed.success
            && failed.message.contains("exited with 3")
            && failed.message.contains("boom"),
        "{failed:?}"
    );

    let http = |path: &str, port: IntOrString| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port,
            http_headers: Some(vec![HTTPHeader {
                name: "X-Probe".into(),
                value: "1".into(),
            }]),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    };
    // httpd may need a moment to listen.
    let mut ok = run(http("/passwd", IntOrString::String("http".into()))).await?;
    for _ in 0..50 {
        if ok.success {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ok = run(http("/passwd", IntOrString::String("http".into()))).await?;
    }
    ensure!(ok.success, "{ok:?}");
    let missing = run(http("/no-such-file", IntOrString::Int(8080))).await?;
    ensure!(
        !missing.success && missing.message.contains("404"),
        "{missing:?}"
    );
    // HTTPS to a plain-HTTP port: the TLS handshake fails.
    let mut https = http("/passwd", IntOrString::Int(8080));
    if let Some(h) = https.http_get.as_mut() {
        h.scheme = Some("HTTPS".into());
    }
    ensure!(!run(https).await?.success);

    let tcp = |port: i32| Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(port),
            host: None,
        }),
        ..Probe::default()
    };
    ensure!(run(tcp(8080)).await?.success);
    ensure!(!run(tcp(8081)).await?.success);

    // Through the manager: readiness over HTTP turns the container ready.
    let manager = ProbeManager::new(docker_api);
    let mut ready_container = container.clone();
    ready_container.readiness_probe = Some(Probe {
        period_seconds: Some(1),
        ..http("/passwd", IntOrString::Int(8080))
    });
    let mut updates = manager.subscribe();
    manager.add(target.clone(), &ready_container);
    let update = tokio::time::timeout(BOUND, updates.recv()).await??;
    ensure!(
        update.kind == ProbeKind::Readiness && update.success,
        "{update:?}"
    );
    ensure!(manager.ready(&target.pod_uid, "web"));
    manager.remove_pod(&target.pod_uid);
    Ok(())
}

/// Starts a labelled (or unlabelled) container running `true` and waits for it to exit.
fn dead_container(cleanup: &mut Cleanup, pod_uid: Option<&str>, name: &str) -> Result<String> {
    let mut args = vec![
        "run".to_owned(),
        "-d".into(),
        "--name".into(),
        unique("verge-gc"),
    ];
    if let Some(uid) = pod_uid {
        args.extend(["--label".into(), format!("io.kubernetes.pod.uid={uid}")]);
        args.extend([
            "--label".into(),
            format!("io.kubernetes.container.name={name}"),
        ]);
    }
    args.extend([TEST_IMAGE.into(), "true".into()]);
    let id = docker(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    cleanup.containers.push(id.clone());
    docker(&["wait", &id])?;
    Ok(id)
}

fn exists(id: &str) -> bool {
    docker(&["inspect", "--type", "container", id]).is_ok()
}

#[tokio::test]
async fn container_gc_removes_dead_pods_and_old_instances_only() -> Result<()> {
    let docker_api = setup()?;
    let mut cleanup = Cleanup::default();
    let (gone, live) = (unique("gone"), unique("live"));
    let gone_id = dead_container(&mut cleanup, Some(&gone), "app")?;
    let old_id = dead_container(&mut cleanup, Some(&live), "app")?;
    std::thread::sleep(Duration::from_millis(1100)); // creation times have second resolution
    let new_id = dead_container(&mut cleanup, Some(&live), "app")?;
    let plain_id = dead_container(&mut cleanup, None, "")?;

    // Every other pod on this Docker counts as live, so other tests' containers are left alone
    // (except for the per-container limit, which edged applies anyway).
    let labelled = docker(&[
        "ps",
        "-a",
        "--filter",
        "label=io.kubernetes.pod.uid",
        "--format",
        "{{.Label \"io.kubernetes.pod.uid\"}}",
    ])?;
    let mut live_pods: HashSet<String> = labelled.lines().map(str::to_owned).collect();
    live_pods.remove(&gone);
    let config = GcConfig {
        minimum_gc_age: Duration::ZERO,
        ..GcConfig::default()
    };
    let gc = GarbageCollector::new(docker_api, config);
    let removed = tokio::time::timeout(BOUND, gc.collect_containers_once(&live_pods)).await??;
    ensure!(
        removed.contains(&gone_id) && removed.contains(&old_id),
        "{removed:?}"
    );
    ensure!(!exists(&gone_id) && !exists(&old_id));
    ensure!(
        exists(&new_id),
        "newest dead instance of a live pod is kept"
    );
    ensure!(exists(&plain_id), "unlabelled containers are never touched");
    Ok(())
}

#[tokio::test]
async fn image_gc_removes_only_unused_unpinned_images() -> Result<()> {
    let docker_api = setup()?;
    let mut cleanup = Cleanup::default();
    // Two images with their own ids (commit with a unique label): one unused, one in use.
    let base = docker(&["create", TEST_IMAGE, "true"])?;
    cleanup.containers.push(base.clone());
    let (unused, used) = (
        format!("{}:1", unique("verge-gc/unused")),
        format!("{}:1", unique("verge-gc/used")),
    );
    for tag in [&unused, &used] {
        docker(&[
            "commit",
            "-c",
            &format!("LABEL verge.gc.test={tag}"),
            &base,
            tag,
        ])?;
        cleanup.images.push(tag.clone());
    }
    let user = docker(&["create", &used, "true"])?;
    cleanup.containers.push(user);

    // Pin everything that exists now but this test's two images (the kit's and other tests'
    // images, some built while this runs), except the test image's id: the test image
    // stays protected by its pinned tag only. Taken right before the pass, which only
    // removes what it lists itself a moment later.
    let test_id = docker(&["image", "inspect", "-f", "{{.Id}}", TEST_IMAGE])?;
    let own: Vec<String> = [&unused, &used]
        .iter()
        .map(|tag| docker(&["image", "inspect", "-f", "{{.Id}}", tag.as_str()]))
        .collect::<Result<_>>()?;
    let mut pinned: Vec<String> = docker(&["images", "-q", "--no-trunc"])?
        .lines()
        .filter(|id| *id != test_id && !own.iter().any(|o| o == id))
        .map(str::to_owned)
        .collect();
    pinned.extend(
        docker(&["images", "--format", "{{.Repository}}:{{.Tag}}"])?
            .lines()
            .filter(|tag| *tag != unused && *tag != used)
            .map(str::to_owned),
    );

    let config = GcConfig {
        image_gc_high_threshold_percent: 0,
        image_gc_low_threshold_percent: 0,
        image_minimum_gc_age: Duration::ZERO,
        pinned_images: vec![TEST_IMAGE.to_owned()],
        ..GcConfig::default()
    };
    let mut gc = GarbageCollector::new(docker_api, config).pin_images(&pinned);
    let report = tokio::time::timeout(BOUND, gc.collect_images_once()).await??;
    ensure!(report.removed.contains(&unused), "{report:?}");
    ensure!(
        docker(&["image", "inspect", &unused]).is_err(),
        "unused image still there"
    );
    ensure!(
        docker(&["image", "inspect", &used]).is_ok(),
        "image in use was removed"
    );
    ensure!(
        docker(&["image", "inspect", TEST_IMAGE]).is_ok(),
        "pinned test image was removed"
    );
    ensure!(
        !report
            .removed
            .iter()
            .any(|r| r == TEST_IMAGE || pinned.contains(r)),
        "{report:?}"
    );
    Ok(())
}
