//! The shared control plane is the pinned Kubernetes release and is usable through
//! kube-rs and the kit's kubectl.

use k8s_openapi::api::core::v1::Namespace;
use verge_testkit::control_plane::K8S_VERSION;

#[tokio::test]
async fn shared_control_plane_serves_the_pinned_release() -> anyhow::Result<()> {
    let cp = verge_testkit::shared().await?;
    let want = format!("v{K8S_VERSION}");

    let client = cp.client().await?;
    let info = client.apiserver_version().await?;
    assert_eq!(info.git_version, want, "server version via kube-rs");

    let out = cp
        .kubectl_command()
        .args(["version", "-o", "json"])
        .output()?;
    assert!(
        out.status.success(),
        "kubectl version failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        json["serverVersion"]["gitVersion"],
        want.as_str(),
        "server version via kubectl"
    );
    assert_eq!(
        json["clientVersion"]["gitVersion"],
        want.as_str(),
        "kubectl's own version"
    );

    let namespaces: kube::Api<Namespace> = kube::Api::all(client);
    let default = namespaces.get_opt("default").await?;
    assert!(default.is_some(), "namespace default exists");
    Ok(())
}

#[tokio::test]
async fn concurrent_callers_share_one_control_plane() -> anyhow::Result<()> {
    let (a, b) = tokio::join!(verge_testkit::shared(), verge_testkit::shared());
    let (a, b) = (a?, b?);
    assert_eq!(a.server_url(), b.server_url());
    assert_eq!(a.pids(), b.pids());
    Ok(())
}
