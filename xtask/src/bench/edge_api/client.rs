//! The bench's clients: the edge API as a pod's in-cluster client sees it (the cluster CA of
//! its `ca.crt`, the `kubernetes.default.svc` name, a token bound to a pod of the node), and timing helpers.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The edge API's listener on the node's pod-network gateway (`edgeApi.port`).
pub const EDGE_API_PORT: u16 = 15443;

/// The gateway address of the node's pod network: the bridge's IPv4 address.
pub fn gateway(node: &str) -> anyhow::Result<String> {
    let bridge = verge_edge_net::podnet::bridge_name(node);
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", &bridge])
        .output()
        .context("running ip addr")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .map(str::to_owned)
        .with_context(|| format!("no IPv4 address on {bridge}: {text:?}"))
}

/// The CA a pod's `ca.crt` holds (the `ca.crt` of `ns`'s `kube-root-ca.crt`, the cluster
/// CA), once the node's edge API has its serving certificate
/// (`<dataDir>/edge-api/serving.crt`), waiting up to a minute for it.
pub async fn pod_ca(
    admin: &kube::Client,
    ns: &str,
    data_dir: &Path,
) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let serving = data_dir.join("edge-api").join("serving.crt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !serving.exists() {
        if Instant::now() > deadline {
            bail!(
                "no edge API serving certificate at {} within a minute",
                serving.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let root = Api::<ConfigMap>::namespaced(admin.clone(), ns)
        .get("kube-root-ca.crt")
        .await?;
    let pem = root
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .context("kube-root-ca.crt has no ca.crt")?;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("parsing kube-root-ca.crt")
}

/// A client of the edge API at `gateway`, verifying it as a pod does (`ca`, the name
/// `kubernetes.default.svc`), with `token`.
pub fn edge_api_client(
    gateway: &str,
    ca: Vec<CertificateDer<'static>>,
    token: &str,
) -> anyhow::Result<kube::Client> {
    let url = format!("https://{gateway}:{EDGE_API_PORT}").parse()?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(ca.into_iter().map(|c| c.to_vec()).collect());
    config.tls_server_name = Some("kubernetes.default.svc".into());
    config.auth_info.token = Some(token.to_owned().into());
    config.read_timeout = Some(Duration::from_secs(30));
    // kube-rs retries 429/503/504 by default; the edge API's offline 503 must come back at
    // once, and each timed request is one request.
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

/// A token of `ns`'s `default` service account bound to pod `pod` (the TokenRequest edged
/// makes for its pods), valid for an hour.
pub async fn bound_token(client: &kube::Client, ns: &str, pod: &Pod) -> anyhow::Result<String> {
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": { "expirationSeconds": 3600, "boundObjectRef": { "apiVersion": "v1",
            "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid } }
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{ns}/serviceaccounts/default/token"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&request)?)?;
    let answer: serde_json::Value = client.request(request).await?;
    answer["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .context("no token in the TokenRequest answer")
}

/// `GET path` through `client`, `n` times: each request's latency (whole body read), sorted.
pub async fn time_gets(
    client: &kube::Client,
    path: &str,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        client
            .request_text(http::Request::get(path).body(Vec::new())?)
            .await
            .with_context(|| format!("GET {path}"))?;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    Ok(latencies)
}

/// Event latency of a ConfigMap watch through `watchers` (each its own client): `n` patches
/// of ConfigMap `name` of `ns` made with `admin`, 100 ms apart; for each watcher the time
/// from sending a patch to its `MODIFIED` event, sorted.
pub async fn watch_latency(
    admin: &kube::Client,
    watchers: &[kube::Client],
    ns: &str,
    name: &str,
    n: usize,
) -> anyhow::Result<Vec<Vec<Duration>>> {
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let rv = configmaps
        .get(name)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut streams = Vec::new();
    for client in watchers {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        streams.push(api.watch(&params, &rv).await?.boxed());
    }
    let mut latencies = vec![Vec::with_capacity(n); watchers.len()];
    for i in 0..n {
        let patch = serde_json::json!({ "data": { "seq": i.to_string() } });
        let sent = Instant::now();
        configmaps
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        for (w, stream) in streams.iter_mut().enumerate() {
            loop {
                let event = tokio::time::timeout(Duration::from_secs(30), stream.try_next())
                    .await
                    .context("no watch event within 30 s")??
                    .context("the watch ended")?;
                if let WatchEvent::Modified(cm) = event
                    && cm.data.as_ref().and_then(|d| d.get("seq")) == Some(&i.to_string())
                {
                    latencies[w].push(sent.elapsed());
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for l in &mut latencies {
        l.sort();
    }
    Ok(latencies)
}

/// Offline event latency of the node's own changes: for each of `containers` (docker ids of
/// pods of `ns`, restartPolicy Always), `docker kill` it and time until the open pod watch
/// through `edge` has a `MODIFIED` event of that pod with a higher restart count.
pub async fn own_change_latency(
    edge: &kube::Client,
    ns: &str,
    containers: &[(String, String)],
) -> anyhow::Result<Vec<Duration>> {
    let pods: Api<Pod> = Api::namespaced(edge.clone(), ns);
    let listed = pods.list(&Default::default()).await?;
    let rv = listed.metadata.resource_version.unwrap_or_default();
    let restarts = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |c| c.iter().map(|c| c.restart_count).sum::<i32>())
    };
    let before: std::collections::HashMap<String, i32> = listed
        .items
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), restarts(p)))
        .collect();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await?
        .boxed();
    let mut latencies = Vec::new();
    for (pod, container) in containers {
        let killed = Instant::now();
        verge_testkit::docker::docker(&["kill", container])?;
        loop {
            let event = tokio::time::timeout(Duration::from_secs(60), stream.try_next())
                .await
                .context("no pod event within 60 s")??
                .context("the watch ended")?;
            if let WatchEvent::Modified(p) = event
                && p.metadata.name.as_deref() == Some(pod)
                && restarts(&p) > before.get(pod).copied().unwrap_or_default()
            {
                latencies.push(killed.elapsed());
                break;
            }
        }
    }
    latencies.sort();
    Ok(latencies)
}
