//! PodCertificateRequests through a fake cloud.

use std::time::Duration;

use serde_json::json;
use verge_core::Operation;
use verge_proto::MessageExt;

use crate::objects::tests::fake_cloud_answering;
use crate::objects::{PodObjects, StoreObjects};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::QueryRegistry;

#[tokio::test]
async fn created_for_the_pod_then_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("s.redb")).expect("open");
    let (hub, upstream) = EdgeHubHandle::detached(8);
    let queries = QueryRegistry::new();
    let cloud = fake_cloud_answering(upstream, queries.clone(), |q| {
        match (q.resource(), q.content.is_empty()) {
            ("ns/podcertificaterequest/p", false) => {
                let mut created: serde_json::Value =
                    serde_json::from_slice(&q.content).expect("request json");
                created["metadata"] = json!({"name": "req-1", "namespace": "ns"});
                (Operation::Response, created.to_string())
            }
            ("ns/podcertificaterequest/req-1", true) => (
                Operation::Response,
                json!({"metadata": {"name": "req-1", "namespace": "ns"},
                    "spec": {"signerName": "a.io/s", "podName": "p", "podUID": "u",
                        "serviceAccountName": "default", "serviceAccountUID": "s",
                        "nodeName": "n", "nodeUID": "nu", "stubPKCS10Request": ""},
                    "status": {"certificateChain": "chain"}})
                .to_string(),
            ),
            _ => (
                Operation::Error,
                "API server: get podcertificaterequest failed: NotFound".to_owned(),
            ),
        }
    });
    let objects = StoreObjects::new(store, hub, queries).with_timeout(Duration::from_secs(5));
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}))
            .expect("pod");
    let request = serde_json::from_value(json!({"metadata": {},
        "spec": {"signerName": "a.io/s", "podName": "p", "podUID": "u",
            "serviceAccountName": "default", "serviceAccountUID": "", "nodeName": "",
            "nodeUID": "", "stubPKCS10Request": "AAEC"}}))
    .expect("request");
    let created = objects
        .create_pod_certificate_request(&pod, request)
        .await
        .expect("created");
    assert_eq!(created.metadata.name.as_deref(), Some("req-1"));
    let read = objects
        .pod_certificate_request("ns", "req-1")
        .await
        .expect("read")
        .expect("exists");
    let chain = read.status.and_then(|s| s.certificate_chain);
    assert_eq!(chain.as_deref(), Some("chain"));
    assert!(
        objects
            .pod_certificate_request("ns", "req-gone")
            .await
            .expect("not found is Ok")
            .is_none()
    );
    drop(objects);
    assert_eq!(
        cloud.await.expect("cloud"),
        [
            "ns/podcertificaterequest/p",
            "ns/podcertificaterequest/req-1",
            "ns/podcertificaterequest/req-gone"
        ]
    );
}
