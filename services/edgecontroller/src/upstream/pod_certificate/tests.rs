//! PodCertificateRequest queries: parsing, the checks, and the calls made as the node
//! against a fake API server.

use serde_json::json;

use super::*;
use crate::node_clients::NodeClients;
use crate::upstream::fake_api::{self, status};

fn pod(node: &str, sa: &str) -> serde_json::Value {
    json!({ "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p", "namespace": "ns", "uid": "pod-uid" },
        "spec": { "nodeName": node, "serviceAccountName": sa, "containers": [] } })
}

fn request(pod_uid: &str, sa: &str) -> serde_json::Value {
    json!({ "apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
        "metadata": {},
        "spec": { "signerName": "e2e.example.com/s", "podName": "p", "podUID": pod_uid,
            "serviceAccountName": sa, "serviceAccountUID": "", "nodeName": "", "nodeUID": "",
            "stubPKCS10Request": "AAEC", "maxExpirationSeconds": 3600,
            "unverifiedUserAnnotations": { "spiffe/path-overriding": "/w" } } })
}

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("typed")
}

#[test]
fn content_creates_and_no_content_reads() {
    let body = request("pod-uid", "app").to_string();
    let Ok(Query::Create { namespace, request }) = parse("edge-1", "ns", "p", body.as_bytes())
    else {
        panic!("a create");
    };
    assert_eq!(
        (namespace.as_str(), request.spec.signer_name.as_str()),
        ("ns", "e2e.example.com/s")
    );
    assert_eq!(
        parse("edge-1", "ns", "req-x", b"").expect("read"),
        Query::Read {
            namespace: "ns".into(),
            name: "req-x".into()
        }
    );
    // The path names the pod the request is for.
    assert!(matches!(
        parse("edge-1", "ns", "other", body.as_bytes()),
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        parse("edge-1", "ns", "p", b"not json"),
        Err(Error::Decode { .. })
    ));
}

#[test]
fn only_for_own_pods_with_their_uid_and_account() {
    let own = typed::<Pod>(pod("edge-1", "app"));
    assert!(check("edge-1", &typed(request("pod-uid", "app")), &own).is_ok());
    assert!(check("edge-1", &typed(request("", "app")), &own).is_ok());
    assert!(matches!(
        check("edge-2", &typed(request("pod-uid", "app")), &own),
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        check("edge-1", &typed(request("other-uid", "app")), &own),
        Err(Error::NotReferenced { .. })
    ));
    assert!(matches!(
        check("edge-1", &typed(request("pod-uid", "default")), &own),
        Err(Error::NotReferenced { .. })
    ));
}

#[test]
fn completed_as_the_kubelet_creates_it() {
    let own = typed::<Pod>(pod("edge-1", "app"));
    let r = complete(
        typed(request("", "app")),
        &own,
        "edge-1",
        "node-uid",
        "sa-uid",
    );
    assert_eq!(r.metadata.generate_name.as_deref(), Some("req-"));
    assert_eq!(r.metadata.namespace.as_deref(), Some("ns"));
    let owner = &r.metadata.owner_references.as_deref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", "p", "pod-uid")
    );
    let s = &r.spec;
    assert_eq!(
        (
            s.pod_uid.as_str(),
            s.node_name.as_str(),
            s.node_uid.as_str(),
            s.service_account_uid.as_str()
        ),
        ("pod-uid", "edge-1", "node-uid", "sa-uid")
    );
    assert_eq!(s.max_expiration_seconds, Some(3600));
}

#[tokio::test]
async fn created_and_read_as_the_node() {
    let (base, seen) = fake_api::client(|method, path| match (method, path) {
        ("GET", "/api/v1/namespaces/ns/pods/p") => (200, pod("edge-1", "app")),
        ("GET", "/api/v1/namespaces/ns/serviceaccounts/app") => (
            200,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "app", "namespace": "ns", "uid": "sa-uid"}}),
        ),
        ("GET", "/api/v1/nodes/edge-1") => (
            200,
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "edge-1", "uid": "node-uid"}}),
        ),
        ("POST", "/apis/certificates.k8s.io/v1/namespaces/ns/podcertificaterequests") => {
            let mut created = request("pod-uid", "app");
            created["metadata"] = json!({"name": "req-abc", "namespace": "ns",
                "managedFields": [{"manager": "edgecontroller"}]});
            (201, created)
        }
        ("GET", "/apis/certificates.k8s.io/v1/namespaces/ns/podcertificaterequests/req-abc") => {
            let mut issued = request("pod-uid", "app");
            issued["metadata"] = json!({"name": "req-abc", "namespace": "ns"});
            issued["status"] = json!({"certificateChain": "chain",
                "conditions": [{"type": "Issued", "status": "True", "reason": "Issued",
                    "message": "", "lastTransitionTime": "2030-01-01T00:00:00Z"}]});
            (200, issued)
        }
        _ => (404, status(404, "NotFound")),
    });
    let client = NodeClients::new(base).of("edge-1");
    let body = request("pod-uid", "app").to_string();
    let query = parse("edge-1", "ns", "p", body.as_bytes()).expect("create");
    let created: serde_json::Value =
        serde_json::from_slice(&answer(&client, "edge-1", query).await.expect("created"))
            .expect("json");
    assert_eq!(created["metadata"]["name"], "req-abc");
    assert!(created["metadata"].get("managedFields").is_none());

    let read = Query::Read {
        namespace: "ns".into(),
        name: "req-abc".into(),
    };
    let issued: serde_json::Value =
        serde_json::from_slice(&answer(&client, "edge-1", read).await.expect("read"))
            .expect("json");
    assert_eq!(issued["status"]["certificateChain"], "chain");
    let gone = Query::Read {
        namespace: "ns".into(),
        name: "req-gone".into(),
    };
    let error = answer(&client, "edge-1", gone).await.expect_err("gone");
    assert!(error.reason().contains("NotFound"), "{}", error.reason());

    let seen = seen.lock().expect("lock");
    assert!(
        seen.iter().all(|s| s.user == "system:node:edge-1"),
        "{seen:?}"
    );
    let post = seen.iter().find(|s| s.method == "POST").expect("a create");
    let sent: serde_json::Value = serde_json::from_slice(&post.body).expect("json");
    assert_eq!(sent["metadata"]["generateName"], "req-");
    assert_eq!(sent["spec"]["nodeName"], "edge-1");
    assert_eq!(sent["spec"]["nodeUID"], "node-uid");
    assert_eq!(sent["spec"]["serviceAccountUID"], "sa-uid");
    assert_eq!(
        sent["spec"]["unverifiedUserAnnotations"]["spiffe/path-overriding"],
        "/w"
    );
}

#[tokio::test]
async fn a_pod_of_another_node_gets_nothing_created() {
    let (base, seen) = fake_api::client(|method, path| match (method, path) {
        ("GET", "/api/v1/namespaces/ns/pods/p") => (200, pod("edge-2", "app")),
        _ => (500, status(500, "InternalError")),
    });
    let client = NodeClients::new(base).of("edge-1");
    let body = request("pod-uid", "app").to_string();
    let query = parse("edge-1", "ns", "p", body.as_bytes()).expect("create");
    let error = answer(&client, "edge-1", query).await.expect_err("refused");
    assert!(matches!(error, Error::Forbidden { .. }), "{error:?}");
    assert_eq!(seen.lock().expect("lock").len(), 1, "only the pod was read");
}
