//! Pod certificates: the request, waiting for the signer, refresh, terminal states,
//! abandoned requests and credentials kept for restarts offline.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::objects::fake::FakeObjects;

const T0: u64 = 1_900_000_000;

fn at(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(T0 + s)
}

fn rfc3339(s: u64) -> String {
    let secs = i64::try_from(T0 + s).expect("seconds");
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .expect("time")
        .to_string()
}

/// A self-signed certificate's PEM.
fn cert(name: &str) -> String {
    let issued = rcgen::generate_simple_self_signed(vec![name.to_owned()]).expect("cert");
    verge_pki::pem_io::cert_to_pem(issued.cert.der())
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns", "uid": "u-1" },
        "spec": { "containers": [{ "name": "c" }] },
    }))
    .expect("pod")
}

fn source(key_type: &str) -> PodCertificateProjection {
    serde_json::from_value(
        json!({"signerName": "e2e.example.com/s", "keyType": key_type,
        "credentialBundlePath": "bundle.pem", "maxExpirationSeconds": 3600,
        "userAnnotations": {"spiffe/path-overriding": "/w"}}),
    )
    .expect("projection")
}

/// Issues `name` with `chain`, refresh from `begin` and expiry at `end` (seconds after T0).
fn issue(objects: &FakeObjects, name: &str, chain: &str, begin: u64, end: u64) {
    objects.set_pcr_status(
        name,
        json!({"certificateChain": chain, "notBefore": rfc3339(0),
            "beginRefreshAt": rfc3339(begin), "notAfter": rfc3339(end),
            "conditions": [{"type": "Issued", "status": "True", "reason": "Issued",
                "message": "", "lastTransitionTime": rfc3339(0)}]}),
    );
}

fn setup() -> (tempfile::TempDir, Arc<FakeObjects>, PodCertificates) {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = PodCertificates::new(dir.path().join("pods"));
    (dir, Arc::new(FakeObjects::default()), certs)
}

fn reason(result: Result<Issued, Failure>) -> String {
    match result {
        Err(Failure::Reason(reason)) => reason,
        Err(Failure::Other(e)) => panic!("not a mount reason: {e}"),
        Ok(_) => panic!("issued"),
    }
}

#[tokio::test]
async fn requested_waits_for_the_signer_then_refreshes_at_begin_refresh_at() {
    let (_dir, objects, certs) = setup();
    let (pod, src) = (pod(), source("ECDSAP256"));
    let get = |t| certs.get(&*objects, &pod, "tls", 0, &src, at(t));
    assert_eq!(reason(get(0).await), NOT_ISSUED);
    let first = objects.pcrs.lock().expect("lock")["req-1"].clone();
    let spec = &first.spec;
    assert_eq!(
        (
            spec.signer_name.as_str(),
            spec.pod_name.as_str(),
            spec.pod_uid.as_str()
        ),
        ("e2e.example.com/s", "web", "u-1")
    );
    assert_eq!(spec.service_account_name, "default");
    assert_eq!(spec.max_expiration_seconds, Some(3600));
    assert!(!spec.stub_pkc_s10_request.0.is_empty());
    let annotations = spec
        .unverified_user_annotations
        .as_ref()
        .expect("annotations");
    assert_eq!(annotations["spiffe/path-overriding"], "/w");
    // Still pending: read again, nothing new requested.
    assert_eq!(reason(get(2).await), NOT_ISSUED);
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 1);
    assert_eq!(certs.next_due("u-1"), None);

    // Issued: the key made here, the chain cleaned of text between blocks.
    let (leaf, ca) = (cert("leaf"), cert("ca"));
    issue(&objects, "req-1", &format!("{leaf}junk\n{ca}"), 1800, 3600);
    let issued = get(4).await.ok().expect("issued");
    assert!(
        issued
            .key
            .expose()
            .starts_with("-----BEGIN PRIVATE KEY-----\n")
    );
    assert_eq!(issued.chain, format!("{leaf}{ca}").into_bytes());
    let due = certs.next_due("u-1").expect("due");
    assert!(
        at(1800) <= due && due < at(1800) + REFRESH_JITTER,
        "{due:?}"
    );

    // Before beginRefreshAt nothing is asked; after it a new request, the old credentials
    // served until it is issued.
    let before = *objects.pcrs_created.lock().expect("lock");
    assert!(get(1000).await.is_ok());
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), before);
    let late = 1800 + REFRESH_JITTER.as_secs();
    let served = get(late).await.ok().expect("still served");
    assert_eq!(served.chain, issued.chain);
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 2);
    assert!(
        certs.next_due("u-1").expect("due") <= at(late),
        "a refresh waits"
    );
    let new_leaf = cert("leaf-2");
    issue(&objects, "req-2", &new_leaf, 3600, 5400);
    let renewed = get(late + 60).await.ok().expect("renewed");
    assert_eq!(renewed.chain, new_leaf.into_bytes());
    assert_ne!(renewed.key.expose(), issued.key.expose());
    assert!(certs.next_due("u-1").expect("due") >= at(3600));
}

#[tokio::test]
async fn denied_is_final_and_unsupported_keys_are_refused() {
    let (_dir, objects, certs) = setup();
    let (pod, src) = (pod(), source("ED25519"));
    let get = |t| certs.get(&*objects, &pod, "tls", 0, &src, at(t));
    assert_eq!(reason(get(0).await), NOT_ISSUED);
    objects.set_pcr_status(
        "req-1",
        json!({"conditions": [{"type": "Denied", "status": "True", "reason": "NotAllowed",
            "message": "no", "lastTransitionTime": rfc3339(0)}]}),
    );
    assert!(reason(get(1).await).contains("permanently denied"));
    assert!(reason(get(100).await).contains("permanently denied"));
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 1);

    let rsa = source("RSA4096");
    let r = reason(certs.get(&*objects, &pod, "tls", 1, &rsa, at(0)).await);
    assert!(r.contains("not supported"), "{r}");
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 1);
}

#[tokio::test]
async fn a_request_gone_for_ten_minutes_is_made_again() {
    let (_dir, objects, certs) = setup();
    let (pod, src) = (pod(), source("ECDSAP384"));
    let get = |t| certs.get(&*objects, &pod, "tls", 0, &src, at(t));
    assert_eq!(reason(get(0).await), NOT_ISSUED);
    objects.pcrs.lock().expect("lock").remove("req-1");
    assert_eq!(reason(get(60).await), NOT_ISSUED, "may be informer lag");
    assert!(reason(get(601).await).contains("deleted"));
    assert_eq!(reason(get(603).await), NOT_ISSUED);
    assert_eq!(*objects.pcrs_created.lock().expect("lock"), 2);
}

#[tokio::test]
async fn issued_credentials_survive_a_restart_offline() {
    let (dir, objects, certs) = setup();
    let (pod, src) = (pod(), source("ECDSAP256"));
    assert_eq!(
        reason(certs.get(&*objects, &pod, "tls", 0, &src, at(0)).await),
        NOT_ISSUED
    );
    let leaf = cert("leaf");
    issue(&objects, "req-1", &leaf, 1800, 3600);
    let issued = certs
        .get(&*objects, &pod, "tls", 0, &src, at(1))
        .await
        .ok()
        .expect("issued");
    let file = dir.path().join("pods/u-1/podcertificates.json");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // A new process, the cloud unreachable: the credentials from the pod's file.
    *objects.fail_pcrs.lock().expect("lock") = true;
    let restarted = PodCertificates::new(dir.path().join("pods"));
    let again = restarted
        .get(&*objects, &pod, "tls", 0, &src, at(10))
        .await
        .ok()
        .expect("kept");
    assert_eq!(again.chain, issued.chain);
    assert_eq!(again.key.expose(), issued.key.expose());
    // Due for refresh and the cloud away: still served.
    let late = 1800 + REFRESH_JITTER.as_secs();
    assert!(
        restarted
            .get(&*objects, &pod, "tls", 0, &src, at(late))
            .await
            .is_ok()
    );
    restarted.forget("u-1");
    assert_eq!(restarted.next_due("u-1"), None);
}
