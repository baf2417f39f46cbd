//! Polling a condition with a deadline, and the waits and checks built on it that the e2e
//! tests, the quickstart and the benchmarks share: a listening port, a usable namespace, a
//! node's `Ready` condition.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::Api;
use kube::api::PostParams;

/// Polls `check` every 250 ms until it returns `Some`, or fails after `timeout` with
/// `what` in the message.
///
/// # Errors
/// The deadline passed; the error names `what` and the last check error, if any.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}: last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until something listens on `127.0.0.1:port`.
///
/// # Errors
/// Nothing listens within `timeout`.
pub async fn wait_for_port(port: u16, timeout: Duration) -> anyhow::Result<()> {
    wait_for(
        &format!("127.0.0.1:{port} to listen"),
        timeout,
        || async move {
            Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ()))
        },
    )
    .await
}

/// Creates namespace `name` (an existing one is reused) and waits until its `default`
/// ServiceAccount exists (pods are refused before that).
///
/// # Errors
/// API errors, or no ServiceAccount within 30 s.
pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        // Left by an interrupted run: reused.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error.into()),
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for("default service account", Duration::from_secs(30), || {
        let sas = sas.clone();
        async move { Ok(sas.get_opt("default").await?.map(|_| ())) }
    })
    .await
}

/// The status of the node's `Ready` condition (`"True"`, `"False"`, `"Unknown"`), or `None`
/// when the condition does not exist.
pub fn ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// Waits until Node `name` exists with its `Ready` condition `True`; returns it.
///
/// # Errors
/// Not so within `timeout` (the last API error, if any, is in the message).
pub async fn wait_node_ready(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(&format!("node {name} Ready"), timeout, || async {
        Ok(nodes
            .get_opt(name)
            .await?
            .filter(|n| ready_status(n).as_deref() == Some("True")))
    })
    .await
}
