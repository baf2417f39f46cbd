//! ClusterTrustBundle queries: parsing, trimming, and the reads made as the node against a
//! fake API server (which records who asked for what).

use serde_json::json;

use super::*;
use crate::node_clients::NodeClients;
use crate::upstream::fake_api::{self, status};

fn bundle(name: &str, signer: &str) -> serde_json::Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
        "metadata": { "name": name, "uid": format!("u-{name}"), "resourceVersion": "7",
            "labels": { "signer.alive": "true" },
            "managedFields": [{ "manager": "kubectl", "operation": "Apply" }] },
        "spec": { "signerName": signer, "trustBundle": "-----BEGIN CERTIFICATE-----\n..." },
    })
}

#[test]
fn queries_parse_from_cluster_scoped_keys() {
    let key = ResourceKey::cluster(ResourceType::ClusterTrustBundle, "root");
    assert_eq!(
        parse("edge-1", &key).expect("name"),
        Query::Name("root".into())
    );
    let key = ResourceKey::trust_bundles_of("example.com/signer");
    assert_eq!(
        parse("edge-1", &key).expect("signer"),
        Query::Signer("example.com/signer".into())
    );
    let bad = ResourceKey::cluster(ResourceType::ClusterTrustBundleList, "no-signer");
    assert!(matches!(
        parse("edge-1", &bad),
        Err(Error::Unsupported { .. })
    ));
    let namespaced = ResourceKey::new("ns", ResourceType::ClusterTrustBundle, "root");
    assert!(matches!(
        parse("edge-1", &namespaced),
        Err(Error::Forbidden { .. })
    ));
}

#[test]
fn answers_are_trimmed_and_sorted() {
    let bundles = ["b", "a"].map(|n| {
        serde_json::from_value::<ClusterTrustBundle>(bundle(n, "example.com/s")).expect("ctb")
    });
    let list: serde_json::Value = serde_json::from_slice(&list_json(bundles)).expect("json");
    assert_eq!(list["kind"], "ClusterTrustBundleList");
    assert_eq!(list["apiVersion"], "certificates.k8s.io/v1");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items[0]["metadata"]["name"], "a");
    assert_eq!(items[1]["metadata"]["name"], "b");
    assert_eq!(items[0]["metadata"]["labels"]["signer.alive"], "true");
    assert_eq!(items[0]["metadata"]["resourceVersion"], "7");
    assert!(items[0]["metadata"].get("managedFields").is_none());
    assert_eq!(items[0]["spec"]["signerName"], "example.com/s");
}

fn fake_api(
    answer: impl Fn(&str) -> (u16, serde_json::Value) + Clone + Send + Sync + 'static,
) -> (kube::Client, fake_api::Log) {
    fake_api::client(move |_, path| answer(path))
}

#[tokio::test]
async fn bundles_are_read_as_the_node() {
    let (base, seen) = fake_api(|path| match path {
        "/apis/certificates.k8s.io/v1/clustertrustbundles/root" => (200, bundle("root", "")),
        "/apis/certificates.k8s.io/v1/clustertrustbundles" => (
            200,
            json!({ "apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundleList",
                "metadata": {}, "items": [bundle("example.com:s:1", "example.com/s")] }),
        ),
        _ => (404, status(404, "NotFound")),
    });
    let client = NodeClients::new(base).of("edge-1");

    let by_name = answer(&client, &Query::Name("root".into())).await;
    let list: serde_json::Value = serde_json::from_slice(&by_name.expect("answer")).expect("json");
    assert_eq!(list["items"][0]["metadata"]["name"], "root");

    // A bundle that does not exist is an empty list.
    let missing = answer(&client, &Query::Name("gone".into())).await;
    let list: serde_json::Value = serde_json::from_slice(&missing.expect("answer")).expect("json");
    assert_eq!(list["items"], json!([]));

    let of_signer = answer(&client, &Query::Signer("example.com/s".into())).await;
    let list: serde_json::Value =
        serde_json::from_slice(&of_signer.expect("answer")).expect("json");
    assert_eq!(list["items"][0]["metadata"]["name"], "example.com:s:1");

    let seen = seen.lock().expect("lock");
    assert!(
        seen.iter().all(|s| s.user == "system:node:edge-1"),
        "{seen:?}"
    );
    let list = &seen[2];
    assert_eq!(
        list.path,
        "/apis/certificates.k8s.io/v1/clustertrustbundles"
    );
    assert!(
        list.query
            .contains("fieldSelector=spec.signerName%3Dexample.com%2Fs"),
        "{}",
        list.query
    );
}

#[tokio::test]
async fn what_the_node_may_not_read_is_an_error() {
    let (base, _) = fake_api(|_| (403, status(403, "Forbidden")));
    let client = NodeClients::new(base).of("edge-1");
    for query in [Query::Name("root".into()), Query::Signer("a.b/c".into())] {
        let error = answer(&client, &query).await.expect_err("refused");
        assert!(matches!(error, Error::Kube { .. }), "{error:?}");
        assert!(error.reason().contains("Forbidden"), "{}", error.reason());
    }
}
