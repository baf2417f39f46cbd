//! `podCertificate` projected volume sources: the mount waits for the signer, then the
//! credential bundle, key and chain files.

use serde_json::json;

use super::*;

/// A self-signed certificate's PEM.
fn cert(name: &str) -> String {
    let issued = rcgen::generate_simple_self_signed(vec![name.to_owned()]).expect("cert");
    verge_pki::pem_io::cert_to_pem(issued.cert.der())
}

#[tokio::test]
async fn files_appear_once_issued() {
    let (_d, objects, m) = manager();
    let ca = cert("ca");
    objects.put_trust_bundle(json!({"metadata": {"name": "e2e.example.com:s:1"},
        "spec": {"signerName": "e2e.example.com/s", "trustBundle": ca}}));
    let p = pod(
        json!([{"name": "tls", "projected": {"sources": [
            {"podCertificate": {"signerName": "e2e.example.com/s", "keyType": "ECDSAP256",
                "credentialBundlePath": "cred.pem", "keyPath": "k/key.pem",
                "certificateChainPath": "chain.pem"}},
            {"clusterTrustBundle": {"signerName": "e2e.example.com/s", "labelSelector": {},
                "path": "trust.pem"}}]}}]),
        json!([]),
    );
    let error = m.prepare(&p).await.expect_err("not issued yet");
    assert_eq!(
        error.to_string(),
        "MountVolume.SetUp failed for volume \"tls\" : credential bundle is not issued yet"
    );
    let leaf = cert("leaf");
    objects.set_pcr_status(
        "req-1",
        json!({"certificateChain": leaf, "beginRefreshAt": "2099-01-01T00:00:00Z",
            "notAfter": "2099-01-02T00:00:00Z", "conditions": [{"type": "Issued",
            "status": "True", "reason": "Issued", "message": "",
            "lastTransitionTime": "2030-01-01T00:00:00Z"}]}),
    );
    let vols = m.prepare(&p).await.expect("issued");
    let dir = vols.host_path("tls").expect("tls");
    let key = read(&dir.join("k/key.pem"));
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{key}");
    assert_eq!(read(&dir.join("chain.pem")), leaf);
    assert_eq!(read(&dir.join("cred.pem")), format!("{key}{leaf}"));
    assert_eq!(read(&dir.join("trust.pem")), ca);
    assert_eq!(mode(&dir.join("cred.pem")), 0o644);
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 1);
    assert!(m.next_refresh("u-1").is_some());
}
