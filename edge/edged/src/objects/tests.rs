//! StoreObjects against a real MetaStore and a fake cloud behind a detached edgehub handle.

use serde_json::json;
use verge_core::Operation;
use verge_proto::{Message, MessageExt};

use super::*;

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "ns", "uid": "u-1" },
        "spec": { "serviceAccountName": "app", "containers": [] },
    }))
    .expect("pod")
}

/// Answers queries like edgecontroller: `ns/configmap/remote` exists, other configmaps are
/// NotFound, tokens echo the request with a status. Returns the queried resources.
fn fake_cloud(
    upstream: tokio::sync::mpsc::Receiver<verge_core::Envelope>,
    queries: QueryRegistry,
) -> tokio::task::JoinHandle<Vec<String>> {
    fake_cloud_answering(upstream, queries, |q| match q.resource() {
        "ns/configmap/remote" => (
            Operation::Response,
            json!({"metadata": {"name": "remote", "namespace": "ns", "uid": "c-1",
                "resourceVersion": "5"}, "data": {"k": "v"}})
            .to_string(),
        ),
        "ns/serviceaccounttoken/app" => {
            let mut tr: serde_json::Value =
                serde_json::from_slice(&q.content).expect("token request json");
            tr["status"] = json!({"token": "t0k", "expirationTimestamp": "2030-01-01T00:00:00Z"});
            (Operation::Response, tr.to_string())
        }
        _ => (
            Operation::Error,
            "API server: get configmap failed: ApiError: configmaps \"x\" not found: NotFound"
                .to_owned(),
        ),
    })
}

/// A fake cloud answering every query on `upstream` with `answer(query)` (operation and
/// content) through `queries`; returns the queried resources when `upstream` closes.
pub(super) fn fake_cloud_answering(
    mut upstream: tokio::sync::mpsc::Receiver<verge_core::Envelope>,
    queries: QueryRegistry,
    answer: impl Fn(&Message) -> (Operation, String) + Send + 'static,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(q) = upstream.recv().await {
            let q = Message::from(q);
            seen.push(q.resource().to_owned());
            let (op, content) = answer(&q);
            let reply = Message::reply(
                "r",
                q.id(),
                "edgecontroller",
                verge_core::Group::Resource,
                op,
                q.resource(),
                content.into_bytes(),
            );
            let reply = verge_core::Envelope::try_from(reply).expect("valid");
            assert!(queries.complete(reply).is_none());
        }
        seen
    })
}

#[tokio::test]
async fn store_first_then_cloud_query_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("s.redb")).expect("open");
    let local = ResourceKey::new("ns", ResourceType::ConfigMap, "local");
    store
        .upsert_if_newer(
            &local,
            "l-1",
            "3",
            br#"{"metadata":{"name":"local"},"data":{"a":"1"}}"#,
        )
        .expect("store");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    let queries = QueryRegistry::new();
    let cloud = fake_cloud(upstream, queries.clone());
    let objects =
        StoreObjects::new(store.clone(), hub, queries).with_timeout(Duration::from_secs(5));

    let cm = objects
        .config_map("ns", "local")
        .await
        .expect("local")
        .expect("found");
    assert_eq!(cm.data.expect("data")["a"], "1");
    let cm = objects
        .config_map("ns", "remote")
        .await
        .expect("remote")
        .expect("found");
    assert_eq!(cm.data.expect("data")["k"], "v");
    let remote = ResourceKey::new("ns", ResourceType::ConfigMap, "remote");
    let stored = store
        .get(&remote)
        .expect("get")
        .expect("stored after the query");
    assert_eq!(
        (stored.uid.as_str(), stored.resource_version.as_str()),
        ("c-1", "5")
    );
    assert!(
        objects
            .config_map("ns", "x")
            .await
            .expect("not found is Ok")
            .is_none()
    );

    let tr = objects
        .service_account_token(&pod(), vec!["api".into()], 3600)
        .await
        .expect("token");
    assert_eq!(tr.status.expect("status").token.as_deref(), Some("t0k"));
    let spec = tr.spec.expect("spec");
    let bound = spec.bound_object_ref.expect("bound");
    assert_eq!(
        (bound.kind.as_deref(), bound.uid.as_deref()),
        (Some("Pod"), Some("u-1"))
    );
    assert_eq!(spec.expiration_seconds, Some(3600));

    drop(objects);
    let seen = cloud.await.expect("cloud");
    assert_eq!(
        seen,
        [
            "ns/configmap/remote",
            "ns/configmap/x",
            "ns/serviceaccounttoken/app"
        ]
    );
}
