//! `clusterTrustBundle` projected volume sources: files, modes, optional sources, mount
//! failures with the kubelet's reason, and the refresh once a minute.

use std::os::unix::fs::MetadataExt;

use serde_json::json;

use super::*;

/// A self-signed certificate's PEM (LF line endings, as Go's `pem.EncodeToMemory`).
fn cert(name: &str) -> String {
    let issued = rcgen::generate_simple_self_signed(vec![name.to_owned()]).expect("cert");
    verge_pki::pem_io::cert_to_pem(issued.cert.der())
}

fn bundle(name: &str, signer: Option<&str>, pem: &str) -> serde_json::Value {
    json!({"metadata": {"name": name, "labels": {"signer.alive": "true"}},
        "spec": {"signerName": signer, "trustBundle": pem}})
}

#[tokio::test]
async fn projected_anchors_by_name_and_signer_refreshed_each_minute() {
    let (_d, objects, m) = manager();
    let (root, one, two) = (cert("root"), cert("one"), cert("two"));
    objects.put_trust_bundle(bundle("root", None, &root));
    objects.put_trust_bundle(bundle("a.io:s:1", Some("a.io/s"), &one));
    let p = pod(
        json!([{"name": "ctb", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "root", "path": "trust-anchors.pem"}},
            {"clusterTrustBundle": {"signerName": "a.io/s", "labelSelector": {},
                "path": "signer/trust-bundle.crt"}},
            {"clusterTrustBundle": {"name": "gone", "path": "missing.pem", "optional": true}}]}}]),
        json!([]),
    );
    let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let vols = m.write_all(&p, t0, true).await.expect("prepare");
    let dir = vols.host_path("ctb").expect("ctb").to_owned();
    assert_eq!(read(&dir.join("trust-anchors.pem")), root);
    assert_eq!(read(&dir.join("signer/trust-bundle.crt")), one);
    assert_eq!(read(&dir.join("missing.pem")), "");
    assert_eq!(mode(&dir.join("trust-anchors.pem")), 0o644);
    assert_eq!(m.next_refresh("u-1"), Some(t0 + Duration::from_secs(60)));

    // A second bundle of the signer: not read before the minute is over ...
    objects.put_trust_bundle(bundle("a.io:s:2", Some("a.io/s"), &two));
    let data = std::fs::read_link(dir.join("..data")).expect("..data");
    m.refresh_at(&p, t0 + Duration::from_secs(59))
        .await
        .expect("refresh");
    assert_eq!(
        std::fs::read_link(dir.join("..data")).expect("..data"),
        data
    );
    // ... then both, written atomically.
    m.refresh_at(&p, t0 + Duration::from_secs(60))
        .await
        .expect("refresh");
    let merged = read(&dir.join("signer/trust-bundle.crt"));
    assert!(
        merged.contains(&one) && merged.contains(&two) && merged.len() == one.len() + two.len()
    );
    assert_ne!(
        std::fs::read_link(dir.join("..data")).expect("..data"),
        data
    );
    assert_eq!(m.next_refresh("u-1"), Some(t0 + Duration::from_secs(120)));
    m.cleanup("u-1").await.expect("cleanup");
    assert_eq!(m.next_refresh("u-1"), None);
}

#[tokio::test]
async fn missing_bundles_fail_the_mount_and_fs_group_makes_them_private() {
    let (d, objects, m) = manager();
    let p = pod(
        json!([{"name": "ctb", "projected": {"sources": [
            {"clusterTrustBundle": {"signerName": "a.io/s", "path": "b.crt",
                "labelSelector": {"matchLabels": {"signer.alive": "unknown"}}}}]}}]),
        json!([]),
    );
    let error = m.prepare(&p).await.expect_err("nothing selected");
    assert_eq!(
        error.to_string(),
        "MountVolume.SetUp failed for volume \"ctb\" : combination of signerName and \
         labelSelector matched zero ClusterTrustBundles"
    );
    let p = pod(
        json!([{"name": "ctb", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "does-not-exist", "path": "b.crt"}}]}}]),
        json!([]),
    );
    let error = m.prepare(&p).await.expect_err("no such bundle");
    assert!(
        error.to_string().contains("\"does-not-exist\" not found"),
        "{error}"
    );

    let root = cert("root");
    objects.put_trust_bundle(bundle("root", None, &root));
    let mut p = pod(
        json!([{"name": "ctb", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "root", "path": "ca.pem"}}]}}]),
        json!([]),
    );
    // As the fsGroup test does: root may give any group, others only their own.
    let meta = std::fs::metadata(d.path()).expect("meta");
    let gid = if meta.uid() == 0 { 2000 } else { meta.gid() };
    p.spec.as_mut().expect("spec").security_context =
        Some(serde_json::from_value(json!({"fsGroup": gid})).expect("security context"));
    let vols = m.prepare(&p).await.expect("prepare");
    let dir = vols.host_path("ctb").expect("ctb");
    assert_eq!(read(&dir.join("ca.pem")), root);
    assert_eq!(mode(&dir.join("ca.pem")), 0o640);
}
