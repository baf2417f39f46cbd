//! Deploying metrics-server on the kit's kubelet node: the release's `manifests/base` (kept
//! beside the binary by the build) through a kustomize overlay with what docs/install.md
//! tells an operator to set for edge nodes — the proxy, the cluster CA, a client certificate,
//! `Hostname` first — plus the kit's own placement (host network on the kubelet node, where
//! the streams front listens on loopback).

use std::path::Path;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};

use super::{CLIENT_NAME, IMAGE, MetricsServerConfig};
use crate::control_plane::{Identity, SERVICE_CIDR, issue};
use crate::{ControlPlane, KubeletNode};

/// metrics-server's HTTPS port on the kubelet node's host network (the release's 10250 is
/// the kubelet's there).
pub const SECURE_PORT: u16 = 4443;

/// The Secret holding its kubelet client certificate, key and the cluster CA.
const CLIENT_SECRET: &str = "metrics-server-kubelet-client";

/// The overlay's JSON patch of the release's Deployment (`{node}`, `{proxy}`, `{no_proxy}`,
/// `{port}`, `{apiserver_host}`, `{apiserver_port}` filled in).
///
/// The API server is named by its own address rather than the `kubernetes` Service: in the
/// kit, edges run in the host's network namespace, and an edge's Service proxy takes the
/// host's connections to cluster IPs (as kube-proxy does on its node), so from the host
/// network `10.96.0.1` is that edge's edge API, not the cluster's API server.
const DEPLOYMENT_PATCH: &str = r#"- op: replace
  path: /spec/template/spec/containers/0/args
  value:
    - --cert-dir=/tmp
    - --secure-port={port}
    - --kubelet-preferred-address-types=Hostname,InternalIP,ExternalIP
    - --kubelet-use-node-status-port
    - --metric-resolution=15s
    - --kubelet-certificate-authority=/etc/metrics-server/kubelet/ca.crt
    - --kubelet-client-certificate=/etc/metrics-server/kubelet/tls.crt
    - --kubelet-client-key=/etc/metrics-server/kubelet/tls.key
- op: add
  path: /spec/template/spec/containers/0/env
  value:
    - {name: HTTPS_PROXY, value: "{proxy}"}
    - {name: NO_PROXY, value: "{no_proxy}"}
    - {name: KUBERNETES_SERVICE_HOST, value: "{apiserver_host}"}
    - {name: KUBERNETES_SERVICE_PORT, value: "{apiserver_port}"}
- op: add
  path: /spec/template/spec/containers/0/volumeMounts/-
  value: {name: kubelet-client, mountPath: /etc/metrics-server/kubelet, readOnly: true}
- op: add
  path: /spec/template/spec/volumes/-
  value: {name: kubelet-client, secret: {secretName: metrics-server-kubelet-client}}
- op: replace
  path: /spec/template/spec/containers/0/ports/0/containerPort
  value: {port}
- op: add
  path: /spec/template/spec/hostNetwork
  value: true
- op: add
  path: /spec/template/spec/dnsPolicy
  value: ClusterFirstWithHostNet
- op: replace
  path: /spec/template/spec/nodeSelector
  value: {kubernetes.io/hostname: "{node}"}
"#;

/// RBAC for the client certificate's user at the kubelet (webhook authorization of
/// `nodes/metrics`), beside the release's for its service account.
const CLIENT_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-server:kubelet-client
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:metrics-server
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: metrics-server
";

/// Deploys metrics-server on `node` (building its binary and image first when needed) and
/// waits until the `v1beta1.metrics.k8s.io` APIService is `Available` (it is once
/// metrics-server has scraped twice: about a minute). Its proxy is the control plane's
/// streams front. Idempotent.
///
/// # Errors
/// The build, the import, `kubectl apply` fail, or the APIService is not available within
/// 3 minutes (the pod's state and log tail included).
pub async fn deploy(cp: &ControlPlane, node: &KubeletNode) -> anyhow::Result<()> {
    let config = MetricsServerConfig::default();
    let image_config = config.clone();
    tokio::task::spawn_blocking(move || image_config.ensure_image()).await??;
    node.import_image(IMAGE)?;
    client_secret(cp).await?;
    let dir = cp.state_dir().join("metrics-server");
    write_overlay(&config, &dir, node.name(), cp)?;
    kubectl(cp, &["apply", "-k", &dir.display().to_string()])?;
    let wait = kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Available",
            "apiservice/v1beta1.metrics.k8s.io",
            "--timeout=180s",
        ],
    );
    if let Err(error) = wait {
        let pods = kubectl(
            cp,
            &[
                "-n",
                "kube-system",
                "get",
                "pods",
                "-l",
                "k8s-app=metrics-server",
                "-o",
                "wide",
            ],
        )
        .unwrap_or_default();
        let apiservice = kubectl(
            cp,
            &[
                "get",
                "apiservice",
                "v1beta1.metrics.k8s.io",
                "-o",
                "jsonpath={.status.conditions}",
            ],
        )
        .unwrap_or_default();
        let logs = kubectl(
            cp,
            &[
                "-n",
                "kube-system",
                "logs",
                "deploy/metrics-server",
                "--tail=30",
            ],
        )
        .unwrap_or_default();
        bail!("{error:#}\nAPIService: {apiservice}\n{pods}\n--- metrics-server ---\n{logs}");
    }
    Ok(())
}

/// Removes what [`deploy`] applied (the release's objects, the client RBAC and Secret).
///
/// # Errors
/// `kubectl delete` fails.
pub async fn remove(cp: &ControlPlane) -> anyhow::Result<()> {
    let dir = cp.state_dir().join("metrics-server");
    if dir.join("kustomization.yaml").is_file() {
        kubectl(
            cp,
            &[
                "delete",
                "-k",
                &dir.display().to_string(),
                "--ignore-not-found",
                "--wait=false",
            ],
        )?;
    }
    let secrets: Api<Secret> = Api::namespaced(cp.client().await?, "kube-system");
    let _ = secrets
        .delete(CLIENT_SECRET, &DeleteParams::default())
        .await;
    Ok(())
}

/// A fresh client certificate for [`CLIENT_NAME`] from `cp`'s cluster CA: (certificate PEM,
/// key PEM). Cloudhub's streams listener in the kit (`streams.clientNames`) and the kit's
/// edges (`streams.kubeletClientNames`) accept it, as metrics-server's.
///
/// # Errors
/// The CA files cannot be read, or signing fails.
pub fn client_certificate(cp: &ControlPlane) -> anyhow::Result<(String, String)> {
    let issued = issue(
        &cp.ca_cert_path(),
        &cp.ca_key_path(),
        &Identity::client(CLIENT_NAME, None),
    )?;
    Ok((issued.cert_pem, issued.key_pem))
}

/// The Secret with a fresh client certificate for [`CLIENT_NAME`] from the cluster CA.
async fn client_secret(cp: &ControlPlane) -> anyhow::Result<()> {
    let (cert_pem, key_pem) = client_certificate(cp)?;
    let ca = std::fs::read(cp.ca_cert_path())?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(CLIENT_SECRET.to_owned()),
            namespace: Some("kube-system".to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            [
                ("tls.crt", cert_pem.into_bytes()),
                ("tls.key", key_pem.into_bytes()),
                ("ca.crt", ca),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v)))
            .collect(),
        ),
        ..Secret::default()
    };
    let secrets: Api<Secret> = Api::namespaced(cp.client().await?, "kube-system");
    secrets
        .patch(
            CLIENT_SECRET,
            &PatchParams::apply("verge-testkit").force(),
            &Patch::Apply(&secret),
        )
        .await
        .context("applying the metrics-server client Secret")?;
    Ok(())
}

/// `<dir>`: `base/` (the release's manifests), `kustomization.yaml`, the Deployment patch
/// and the client RBAC.
fn write_overlay(
    config: &MetricsServerConfig,
    dir: &Path,
    node: &str,
    cp: &ControlPlane,
) -> anyhow::Result<()> {
    let base = config.cache_dir.join("manifests").join("base");
    if !base.join("kustomization.yaml").is_file() {
        bail!("{} is missing: rebuild metrics-server", base.display());
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("base"))?;
    for entry in std::fs::read_dir(&base)? {
        let entry = entry?;
        std::fs::copy(entry.path(), dir.join("base").join(entry.file_name()))?;
    }
    let apiserver = cp.advertise_address();
    let patch = DEPLOYMENT_PATCH
        .replace("{port}", &super::SECURE_PORT.to_string())
        .replace(
            "{proxy}",
            &format!("https://127.0.0.1:{}", cp.streams_front_port()),
        )
        .replace(
            "{no_proxy}",
            &format!("{SERVICE_CIDR},{apiserver},127.0.0.1,localhost"),
        )
        .replace("{apiserver_host}", &apiserver.to_string())
        .replace("{apiserver_port}", &cp.apiserver_port().to_string())
        .replace("{node}", node);
    std::fs::write(dir.join("deployment-patch.yaml"), patch)?;
    std::fs::write(dir.join("kubelet-client-rbac.yaml"), CLIENT_RBAC)?;
    let (name, tag) = IMAGE.rsplit_once(':').unwrap_or((IMAGE, "latest"));
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n\
             kind: Kustomization\n\
             resources:\n  - base\n  - kubelet-client-rbac.yaml\n\
             images:\n  - name: gcr.io/k8s-staging-metrics-server/metrics-server\n    \
             newName: {name}\n    newTag: {tag}\n\
             patches:\n  - path: deployment-patch.yaml\n    target:\n      \
             kind: Deployment\n      name: metrics-server\n"
        ),
    )?;
    Ok(())
}

/// `kubectl <args>` against `cp`; its stdout, or an error with its stderr.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> anyhow::Result<String> {
    let out = cp
        .kubectl_command()
        .args(args)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
