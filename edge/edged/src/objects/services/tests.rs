//! Service lists: the cloud's answer kept, the kept answer used when the cloud cannot answer.

use std::time::Duration;

use serde_json::json;
use verge_core::Operation;
use verge_proto::MessageExt;

use crate::objects::tests::fake_cloud_answering;
use crate::objects::{PodObjects, StoreObjects};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::QueryRegistry;

/// Answers `ns/servicelist/_` with one service, refuses every other query (as edgecontroller
/// refuses a namespace without pods of the node).
fn fake_cloud(
    upstream: tokio::sync::mpsc::Receiver<verge_core::Envelope>,
    queries: QueryRegistry,
) -> tokio::task::JoinHandle<Vec<String>> {
    fake_cloud_answering(upstream, queries, |q| match q.resource() {
        "ns/servicelist/_" => (
            Operation::Response,
            json!({"apiVersion": "v1", "kind": "ServiceList", "metadata": {},
                "items": [{"metadata": {"name": "web", "namespace": "ns"},
                    "spec": {"clusterIP": "10.0.0.5", "ports": [{"port": 80}]}}]})
            .to_string(),
        ),
        _ => (
            Operation::Error,
            "forbidden: node \"e\" has no pod in namespace \"other\"".to_owned(),
        ),
    })
}

fn names(services: &[k8s_openapi::api::core::v1::Service]) -> Vec<&str> {
    services
        .iter()
        .map(|s| s.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn cloud_answer_kept_and_used_when_the_cloud_cannot_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.redb");
    let store = MetaStore::open(&path).expect("open");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    let queries = QueryRegistry::new();
    let cloud = fake_cloud(upstream, queries.clone());
    let objects =
        StoreObjects::new(store.clone(), hub, queries).with_timeout(Duration::from_secs(5));
    assert_eq!(
        names(&objects.services("ns").await.expect("listed")),
        ["web"]
    );
    // Refused, nothing kept: no services (and no error).
    assert!(objects.services("other").await.expect("refused").is_empty());
    drop(objects);
    assert_eq!(
        cloud.await.expect("cloud"),
        ["ns/servicelist/_", "other/servicelist/_"]
    );
    drop(store);

    // edgecore restarted offline: the kept answer, from the reopened store.
    let store = MetaStore::open(&path).expect("reopen");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    drop(upstream);
    let objects = StoreObjects::new(store, hub, QueryRegistry::new());
    assert_eq!(names(&objects.services("ns").await.expect("kept")), ["web"]);
    assert!(objects.services("never").await.expect("none").is_empty());
}
