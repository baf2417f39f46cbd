//! ClusterTrustBundles: the cloud's answers kept, the kept answers used when the cloud
//! cannot answer.

use std::time::Duration;

use serde_json::json;
use verge_core::Operation;
use verge_proto::MessageExt;

use crate::objects::tests::fake_cloud_answering;
use crate::objects::{PodObjects, StoreObjects};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::QueryRegistry;

fn bundle(name: &str, signer: Option<&str>) -> serde_json::Value {
    json!({"metadata": {"name": name, "labels": {"signer.alive": "true"}},
        "spec": {"signerName": signer, "trustBundle": format!("pem of {name}")}})
}

fn list(items: &[serde_json::Value]) -> String {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundleList",
        "metadata": {}, "items": items})
    .to_string()
}

/// Answers like edgecontroller: `root` exists, `gone` does not; signer `example.com/s` has
/// one bundle (and, as a stale answer might, one of another signer); the rest is refused.
fn fake_cloud(
    upstream: tokio::sync::mpsc::Receiver<verge_core::Envelope>,
    queries: QueryRegistry,
) -> tokio::task::JoinHandle<Vec<String>> {
    fake_cloud_answering(upstream, queries, |q| match q.resource() {
        "_/clustertrustbundle/root" => (Operation::Response, list(&[bundle("root", None)])),
        "_/clustertrustbundle/gone" => (Operation::Response, list(&[])),
        "_/clustertrustbundlelist/example.com:s" => (
            Operation::Response,
            list(&[
                bundle("example.com:s:1", Some("example.com/s")),
                bundle("other.com:t:1", Some("other.com/t")),
            ]),
        ),
        _ => (
            Operation::Error,
            "API server: list clustertrustbundles failed: Forbidden".to_owned(),
        ),
    })
}

fn names(bundles: &[k8s_openapi::api::certificates::v1::ClusterTrustBundle]) -> Vec<&str> {
    bundles
        .iter()
        .map(|b| b.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn cloud_answers_kept_and_used_when_the_cloud_cannot_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.redb");
    let store = MetaStore::open(&path).expect("open");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    let queries = QueryRegistry::new();
    let cloud = fake_cloud(upstream, queries.clone());
    let objects =
        StoreObjects::new(store.clone(), hub, queries).with_timeout(Duration::from_secs(5));
    let root = objects
        .cluster_trust_bundle("root")
        .await
        .expect("answered");
    assert_eq!(
        root.expect("exists").spec.trust_bundle,
        "pem of root".to_owned()
    );
    assert!(
        objects
            .cluster_trust_bundle("gone")
            .await
            .expect("answered")
            .is_none()
    );
    let of_signer = objects
        .cluster_trust_bundles_of("example.com/s")
        .await
        .expect("answered");
    assert_eq!(names(&of_signer), ["example.com:s:1"]);
    // Refused and nothing kept: the cloud's error.
    assert!(objects.cluster_trust_bundles_of("x.io/y").await.is_err());
    drop(objects);
    assert_eq!(
        cloud.await.expect("cloud"),
        [
            "_/clustertrustbundle/root",
            "_/clustertrustbundle/gone",
            "_/clustertrustbundlelist/example.com:s",
            "_/clustertrustbundlelist/x.io:y",
        ]
    );
    drop(store);

    // edgecore restarted offline: the kept answers (absence included), from the reopened
    // store; what was never answered is an error.
    let store = MetaStore::open(&path).expect("reopen");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    drop(upstream);
    let objects = StoreObjects::new(store, hub, QueryRegistry::new());
    assert!(
        objects
            .cluster_trust_bundle("root")
            .await
            .expect("kept")
            .is_some()
    );
    assert!(
        objects
            .cluster_trust_bundle("gone")
            .await
            .expect("kept")
            .is_none()
    );
    let of_signer = objects
        .cluster_trust_bundles_of("example.com/s")
        .await
        .expect("kept");
    assert_eq!(names(&of_signer), ["example.com:s:1"]);
    assert!(objects.cluster_trust_bundle("never").await.is_err());
}
