//! Trust anchors: normalization, selection and the per-pod cache.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use serde_json::json;

use super::*;
use crate::objects::fake::FakeObjects;

/// A self-signed certificate's PEM (LF line endings, as Go's `pem.EncodeToMemory`).
fn cert(name: &str) -> String {
    let issued = rcgen::generate_simple_self_signed(vec![name.to_owned()]).expect("cert");
    verge_pki::pem_io::cert_to_pem(issued.cert.der())
}

fn projection(json: serde_json::Value) -> ClusterTrustBundleProjection {
    serde_json::from_value(json).expect("projection")
}

fn objects_with(bundles: &[(&str, Option<&str>, &str, &str)]) -> Arc<FakeObjects> {
    let objects = Arc::new(FakeObjects::default());
    for (name, signer, alive, pem) in bundles {
        objects.put_trust_bundle(json!({"metadata": {"name": name,
            "labels": {"signer.alive": alive}},
            "spec": {"signerName": signer, "trustBundle": pem}}));
    }
    objects
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("utf-8")
}

#[test]
fn normalize_dedupes_drops_headers_and_keeps_go_encoding() {
    let (a, b, c) = (cert("a"), cert("b"), cert("c"));
    let noisy = format!("comment before\n{a}between\n{b}");
    let out = normalize([noisy.as_str(), &format!("{b}{c}"), ""]);
    let out = text(&out);
    for pem in [&a, &b, &c] {
        assert_eq!(out.matches(pem.as_str()).count(), 1, "{out}");
    }
    assert_eq!(out.len(), a.len() + b.len() + c.len());
    assert!(!out.contains("comment") && !out.contains("between"));
    // The order is stable within the process.
    assert_eq!(
        normalize([noisy.as_str(), &c]),
        normalize([c.as_str(), &noisy])
    );
    assert!(normalize([""]).is_empty());
}

#[tokio::test]
async fn by_name_optional_or_not() {
    let root = cert("root");
    let objects = objects_with(&[("root", None, "true", &root)]);
    let p = projection(json!({"name": "root", "path": "ca.pem"}));
    assert_eq!(
        anchors(&*objects, &p).await.ok().as_deref(),
        Some(root.as_bytes())
    );
    let p = projection(json!({"name": "gone", "path": "ca.pem", "optional": true}));
    assert_eq!(anchors(&*objects, &p).await.ok(), Some(Vec::new()));
    let p = projection(json!({"name": "gone", "path": "ca.pem"}));
    let Err(Failure::Reason(reason)) = anchors(&*objects, &p).await else {
        panic!("a missing bundle fails the mount");
    };
    assert!(reason.contains("\"gone\" not found"), "{reason}");
    let p = projection(json!({"path": "ca.pem"}));
    let Err(Failure::Reason(reason)) = anchors(&*objects, &p).await else {
        panic!("neither name nor signer");
    };
    assert!(reason.contains("either name or signerName"), "{reason}");
}

#[tokio::test]
async fn by_signer_merges_what_the_selector_matches() {
    let (one, two, dead, other) = (cert("1"), cert("2"), cert("d"), cert("o"));
    let objects = objects_with(&[
        ("a.io:s:1", Some("a.io/s"), "true", &one),
        ("a.io:s:2", Some("a.io/s"), "true", &format!("{two}{one}")),
        ("a.io:s:3", Some("a.io/s"), "false", &dead),
        ("b.io:t:1", Some("b.io/t"), "true", &other),
    ]);
    let alive = projection(json!({"signerName": "a.io/s", "path": "b.pem",
        "labelSelector": {"matchLabels": {"signer.alive": "true"}}}));
    let out = anchors(&*objects, &alive).await.ok().expect("anchors");
    let out = text(&out);
    assert_eq!(out.len(), one.len() + two.len(), "{out}");
    assert!(out.contains(&one) && out.contains(&two));
    let every = projection(json!({"signerName": "a.io/s", "path": "b.pem", "labelSelector": {}}));
    let out = anchors(&*objects, &every).await.ok().expect("anchors");
    assert_eq!(out.len(), one.len() + two.len() + dead.len());
    // A missing selector matches nothing; so does one matching no bundle.
    let reads = *objects.trust_bundle_reads.lock().expect("lock");
    let nil = projection(json!({"signerName": "a.io/s", "path": "b.pem", "optional": true}));
    assert_eq!(anchors(&*objects, &nil).await.ok(), Some(Vec::new()));
    assert_eq!(*objects.trust_bundle_reads.lock().expect("lock"), reads);
    let none = projection(json!({"signerName": "a.io/s", "path": "b.pem",
        "labelSelector": {"matchLabels": {"signer.alive": "unknown"}}}));
    let Err(Failure::Reason(reason)) = anchors(&*objects, &none).await else {
        panic!("nothing selected fails the mount");
    };
    assert!(reason.contains("matched zero"), "{reason}");
    let bad = projection(json!({"signerName": "a.io/s", "path": "b.pem",
        "labelSelector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}));
    assert!(matches!(
        anchors(&*objects, &bad).await,
        Err(Failure::Reason(_))
    ));
}

#[tokio::test]
async fn cache_reads_again_after_resync_and_keeps_anchors_when_the_cloud_is_away() {
    let (old, new) = (cert("old"), cert("new"));
    let objects = objects_with(&[("root", None, "true", &old)]);
    let cache = TrustBundleCache::default();
    let p = projection(json!({"name": "root", "path": "ca.pem"}));
    let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let get = |at: SystemTime| cache.get(&*objects, "u-1", "ca", 0, &p, at);
    assert_eq!(get(t0).await.ok().as_deref(), Some(old.as_bytes()));
    assert_eq!(cache.next_due("u-1"), Some(t0 + RESYNC));
    assert_eq!(cache.next_due("u-2"), None);

    // Changed in the cloud: seen only once RESYNC passed.
    objects.put_trust_bundle(json!({"metadata": {"name": "root"}, "spec": {"trustBundle": new}}));
    let soon = t0 + RESYNC / 2;
    assert_eq!(get(soon).await.ok().as_deref(), Some(old.as_bytes()));
    assert_eq!(*objects.trust_bundle_reads.lock().expect("lock"), 1);
    let t1 = t0 + RESYNC;
    assert_eq!(get(t1).await.ok().as_deref(), Some(new.as_bytes()));
    assert_eq!(cache.next_due("u-1"), Some(t1 + RESYNC));

    // The cloud cannot answer: the cached anchors stay, still due.
    *objects.fail_trust_bundles.lock().expect("lock") = true;
    let t2 = t1 + RESYNC;
    assert_eq!(get(t2).await.ok().as_deref(), Some(new.as_bytes()));
    assert_eq!(cache.next_due("u-1"), Some(t2));
    cache.forget("u-1");
    assert_eq!(cache.next_due("u-1"), None);
    assert!(matches!(get(t2).await, Err(Failure::Other(_))));
}
