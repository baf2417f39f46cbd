//! Every binary's `/metrics` (issue 13, Deliver 3): scrapes cloudhub, edgecontroller,
//! devicecontroller and an edgecore, finds the documented series (docs/observability.md
//! "Metrics"), and sees them move as a pod starts on the edge and the edge's link is cut
//! and healed, and as a join is refused.
//!
//! The cloud services serve `/metrics` on their health port (a free port in tests, read
//! from their "health endpoint serving" log line); edgecore serves it on its default
//! `metricsAddr`, `127.0.0.1:10008`, inside the edge's network namespace, so the test
//! scrapes it from inside the namespace (bash's `/dev/tcp`), which works while the link is
//! cut too.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use verge_e2e::{Cloud, Edge, create_namespace, ready_status, sleeper_pod, via_host, wait_for};
use verge_testkit::netns::EdgeNetns;
use verge_testkit::process::{ChildProcess, workspace_bin};

/// The address a cloud service's health endpoint (and `/metrics`) bound, from the latest
/// "health endpoint serving" line of its log (a restart logs a new one).
fn health_addr(process: &ChildProcess) -> anyhow::Result<SocketAddr> {
    let log = strip_ansi(&process.log());
    log.lines()
        .rev()
        .filter(|l| l.contains("health endpoint serving"))
        .find_map(|l| {
            let rest = &l[l.find("addr=")? + 5..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .with_context(|| format!("no health endpoint address in {}'s log", process.name()))
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The body of `GET /metrics` at `addr` (HTTP/1.0: the server closes after the response).
async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    body(&String::from_utf8_lossy(&response))
}

/// The body of an HTTP response after checking its status is 200.
fn body(response: &str) -> anyhow::Result<String> {
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no HTTP header end")?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    Ok(body.to_owned())
}

/// `GET /metrics` of the edgecore in `netns` on its loopback (`127.0.0.1:10008`).
fn scrape_edge(netns: &EdgeNetns) -> anyhow::Result<String> {
    let script = "exec 3<>/dev/tcp/127.0.0.1/10008 && \
                  printf 'GET /metrics HTTP/1.0\\r\\nHost: metrics\\r\\n\\r\\n' >&3 && cat <&3";
    let out = netns
        .command(std::path::Path::new("bash"))
        .args(["-c", script])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "scrape in the namespace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    body(&String::from_utf8_lossy(&out.stdout))
}

/// The sum of every sample of `series` whose labels contain all of `labels` (`k="v"`
/// pairs); `None` when there is none.
fn sample(text: &str, series: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, label_text) = match name_labels.split_once('{') {
            Some((n, l)) => (n, l),
            None => (name_labels, ""),
        };
        if name != series || !labels.iter().all(|l| label_text.contains(l)) {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// `sample` or an error naming the series and showing the scrape.
fn need(text: &str, series: &str, labels: &[&str]) -> anyhow::Result<f64> {
    sample(text, series, labels).with_context(|| format!("{series}{labels:?} not found in\n{text}"))
}

async fn node_ready(nodes: &Api<Node>, name: &str) -> anyhow::Result<bool> {
    Ok(nodes
        .get_opt(name)
        .await?
        .is_some_and(|n| ready_status(&n).as_deref() == Some("True")))
}

/// The series every cloud binary and the edge must serve, from the start.
const CLOUDHUB: &[&str] = &[
    "verge_cloudhub_sessions",
    "verge_cloudhub_messages_total",
    "verge_cloudhub_queue_depth",
    "verge_cloudhub_delivery_retries_total",
    "verge_cloudhub_delivery_failures_total",
    "verge_cloudhub_refusals_total",
    "verge_kube_api_requests_total",
];
const CONTROLLER: &[&str] = &[
    "verge_controller_messages_total",
    "verge_controller_watch_events_total",
    "verge_controller_resync_duration_seconds_count",
    "verge_controller_resync_objects_total",
    "verge_kube_api_request_duration_seconds_count",
    "verge_kube_api_requests_total",
];
const EDGE: &[&str] = &[
    "verge_edgecore_messages_total",
    "verge_edgecore_connected",
    "verge_edgecore_outbox_entries",
    "verge_edgecore_outbox_oldest_age_seconds",
];

#[tokio::test(flavor = "multi_thread")]
async fn every_binary_serves_metrics_that_move() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_devicecontroller(&cp).await?;
    let netns = EdgeNetns::create(14)?;
    let name = format!("e2e-metrics-{}", std::process::id());
    let mut edge = Edge::with_config(&name, &cloud, |c| {
        via_host(c, &cloud, netns.host_addr());
        c.edged.node_ip = Some(netns.edge_addr().into());
        // The default, loopback of the edge's own namespace.
        c.metrics_addr = Some(SocketAddr::from(([127, 0, 0, 1], 10008)));
    })?;
    edge.start_in(&netns)?;
    let result = scenario(&cloud, &edge, &netns, &client, &name).await;
    let result = result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(40),
            edge.logs(60)
        )
    });
    let _ = netns.heal();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
    edge.kill9()?;
    verge_e2e::remove_managed_containers(|n| n == name)?;
    let nodes: Api<Node> = Api::all(client);
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    result
}

async fn scenario(
    cloud: &Cloud,
    _edge: &Edge,
    netns: &EdgeNetns,
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("edge Ready", Duration::from_secs(30), || async {
        Ok(node_ready(&nodes, name).await?.then_some(()))
    })
    .await?;
    let hub = health_addr(&cloud.cloudhub)?;
    let ec = health_addr(&cloud.edgecontroller)?;
    let dc = health_addr(
        cloud
            .devicecontroller
            .as_ref()
            .context("devicecontroller started")?,
    )?;

    // ---- every series is there once the edge is connected ----
    let hub_text = wait_for("cloudhub series", Duration::from_secs(20), || async {
        let text = scrape(hub).await?;
        Ok(CLOUDHUB
            .iter()
            .all(|s| sample(&text, s, &[]).is_some())
            .then_some(text))
    })
    .await?;
    anyhow::ensure!(need(&hub_text, "verge_cloudhub_sessions", &[])? >= 1.0);
    need(
        &hub_text,
        "verge_cloudhub_queue_depth",
        &[&format!("node=\"{name}\"")],
    )?;
    for (addr, what) in [(ec, "edgecontroller"), (dc, "devicecontroller")] {
        wait_for(
            &format!("{what} series"),
            Duration::from_secs(30),
            || async {
                let text = scrape(addr).await?;
                Ok(CONTROLLER
                    .iter()
                    .all(|s| sample(&text, s, &[]).is_some())
                    .then_some(()))
            },
        )
        .await?;
    }
    let ec_before = scrape(ec).await?;
    let edge_before = wait_for("edgecore series", Duration::from_secs(20), || async {
        let text = scrape_edge(netns)?;
        Ok(EDGE
            .iter()
            .all(|s| sample(&text, s, &[]).is_some())
            .then_some(text))
    })
    .await?;
    anyhow::ensure!(need(&edge_before, "verge_edgecore_connected", &[])? == 1.0);
    let hub_down = |t: &str| {
        sample(
            t,
            "verge_cloudhub_messages_total",
            &["direction=\"downstream\"", "group=\"resource\""],
        )
        .unwrap_or(0.0)
    };
    let ec_sent = |t: &str| {
        sample(
            t,
            "verge_controller_messages_total",
            &["direction=\"sent\""],
        )
        .unwrap_or(0.0)
    };
    let pod_watch = |t: &str| {
        sample(
            t,
            "verge_controller_watch_events_total",
            &["resource=\"pods\""],
        )
        .unwrap_or(0.0)
    };

    // ---- a pod: messages, watch events, API requests and the pod start stages move ----
    create_namespace(client, name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    // A pod of one container (no sandbox) and one of two (with a sandbox): every stage.
    let mut pair = sleeper_pod(name, "pair", name)?;
    if let Some(spec) = pair.spec.as_mut() {
        let mut side = spec.containers[0].clone();
        side.name = "side".into();
        spec.containers.push(side);
    }
    for pod in [sleeper_pod(name, "web", name)?, pair] {
        pods.create(&PostParams::default(), &pod).await?;
    }
    for pod in ["web", "pair"] {
        verge_e2e::wait_running(&pods, pod, Duration::from_secs(60)).await?;
    }
    let edge_after = wait_for("pod start recorded", Duration::from_secs(20), || async {
        let text = scrape_edge(netns)?;
        let total = sample(
            &text,
            "verge_edgecore_pod_start_duration_seconds_count",
            &["stage=\"total\""],
        );
        Ok(total.is_some_and(|n| n >= 2.0).then_some(text))
    })
    .await?;
    for stage in ["image", "sandbox", "container"] {
        let label = format!("stage=\"{stage}\"");
        let n = need(
            &edge_after,
            "verge_edgecore_pod_start_duration_seconds_count",
            &[&label],
        )?;
        anyhow::ensure!(n >= 1.0, "stage {stage}: {n}");
    }
    let stage_sum = |stage: &str| {
        let label = format!("stage=\"{stage}\"");
        sample(
            &edge_after,
            "verge_edgecore_pod_start_duration_seconds_sum",
            &[&label],
        )
        .unwrap_or(f64::NAN)
    };
    eprintln!(
        "pod start seconds (sum over attempts): image {:.3}, sandbox {:.3}, container {:.3}, total {:.3}",
        stage_sum("image"),
        stage_sum("sandbox"),
        stage_sum("container"),
        stage_sum("total")
    );
    let hub_after = scrape(hub).await?;
    anyhow::ensure!(
        hub_down(&hub_after) > hub_down(&hub_text),
        "cloudhub downstream resource messages did not move"
    );
    let ec_after = scrape(ec).await?;
    anyhow::ensure!(
        ec_sent(&ec_after) > ec_sent(&ec_before),
        "edgecontroller sent nothing"
    );
    anyhow::ensure!(
        pod_watch(&ec_after) > pod_watch(&ec_before),
        "no pod watch events"
    );
    need(
        &ec_after,
        "verge_kube_api_requests_total",
        &["resource=\"pods/status\"", "verb=\"patch\""],
    )?;

    // ---- cut the link: the edge sees it is offline and queues reports ----
    netns.cut()?;
    // An idle node sends nothing of its own accord (its status only when it changes, its
    // Lease renewed by edgecontroller), so the pod's container is killed: edged restarts it,
    // and the pod's new status waits in the outbox.
    let uid = pods
        .get("web")
        .await?
        .metadata
        .uid
        .context("pod web has no uid")?;
    let app = verge_e2e::containers_with(
        &[
            ("io.kubernetes.pod.uid", &uid),
            ("io.kubernetes.container.name", "main"),
        ],
        false,
    )?;
    anyhow::ensure!(!app.is_empty(), "no running container of pod web");
    for id in &app {
        verge_testkit::docker::docker(&["kill", id])?;
    }
    let offline = wait_for(
        "edge offline with queued reports",
        Duration::from_secs(40),
        || async {
            let text = scrape_edge(netns)?;
            let connected = need(&text, "verge_edgecore_connected", &[])?;
            let entries = need(&text, "verge_edgecore_outbox_entries", &[])?;
            Ok((connected == 0.0 && entries >= 1.0).then_some(text))
        },
    )
    .await?;
    let age = need(&offline, "verge_edgecore_outbox_oldest_age_seconds", &[])?;
    anyhow::ensure!(age > 0.0, "oldest outbox entry age {age}");
    eprintln!(
        "offline: {} outbox entries, oldest {age:.1} s",
        need(&offline, "verge_edgecore_outbox_entries", &[])?
    );
    wait_for(
        "cloudhub drops the session",
        Duration::from_secs(40),
        || async {
            let text = scrape(hub).await?;
            let gone = need(&text, "verge_cloudhub_sessions", &[])? == 0.0
                && sample(
                    &text,
                    "verge_cloudhub_queue_depth",
                    &[&format!("node=\"{name}\"")],
                )
                .is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;

    // ---- heal: reconnect counted, the outbox drains ----
    netns.heal()?;
    let reconnects_before = sample(&offline, "verge_edgecore_reconnects_total", &[]).unwrap_or(0.0);
    wait_for(
        "edge back with its outbox drained",
        Duration::from_secs(60),
        || async {
            let text = scrape_edge(netns)?;
            let back = need(&text, "verge_edgecore_connected", &[])? == 1.0
                && need(&text, "verge_edgecore_reconnects_total", &[])? > reconnects_before
                && need(&text, "verge_edgecore_outbox_oldest_age_seconds", &[])? < age + 30.0
                && need(&text, "verge_edgecore_outbox_entries", &[])? <= 1.0;
            Ok(back.then_some(()))
        },
    )
    .await?;
    wait_for("cloudhub session back", Duration::from_secs(30), || async {
        Ok((need(&scrape(hub).await?, "verge_cloudhub_sessions", &[])? >= 1.0).then_some(()))
    })
    .await?;
    // The reconnect resynced the node: the controller timed it.
    wait_for("a resync timed", Duration::from_secs(30), || async {
        let text = scrape(ec).await?;
        let n = need(&text, "verge_controller_resync_duration_seconds_count", &[])?;
        Ok((n >= 2.0).then_some(()))
    })
    .await?;
    refused_join_is_counted(cloud, hub, name).await
}

/// A join (the CA pinned) with a bootstrap token the cluster does not know is refused, and
/// cloudhub counts it in `verge_cloudhub_refusals_total{reason="auth_token"}`.
async fn refused_join_is_counted(cloud: &Cloud, hub: SocketAddr, name: &str) -> anyhow::Result<()> {
    const AUTH_TOKEN: &[&str] = &["reason=\"auth_token\""];
    let refusals = |text: &str| sample(text, "verge_cloudhub_refusals_total", AUTH_TOKEN);
    let before = refusals(&scrape(hub).await?).unwrap_or(0.0);
    let stranger = Edge::with_config(&format!("{name}-refused"), cloud, |c| {
        c.edge_hub.token.clear();
    })?;
    let out = std::process::Command::new(workspace_bin("edgecore")?)
        .arg("--config")
        .arg(stranger.config_path())
        .args(["join", "--cloudhub", &cloud.join_url])
        .args(["--token", "u00000.0123456789abcdef"])
        .args(["--ca-cert-hash", &cloud.ca_cert_hash])
        .output()?;
    anyhow::ensure!(
        !out.status.success(),
        "a join with an unknown token succeeded"
    );
    wait_for("the refusal counted", Duration::from_secs(20), || async {
        let now = refusals(&scrape(hub).await?).unwrap_or(0.0);
        Ok((now > before).then_some(()))
    })
    .await
}
