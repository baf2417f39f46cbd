//! Trust at cloudhub's doors: EdgeHub takes only mutual TLS with a node certificate from the
//! Verge CA and a hello naming that node; ControllerHub takes only allowed service-account
//! tokens; Join trades a valid bootstrap token and CSR for a certificate, through a recorded
//! and approved CSR. (The cluster behind the decisions is a fake of our `ClusterApi`; the
//! e2e tests use the real API server.)
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{attach, cluster, connect, connect_as, keepalive, start, tls_channel, try_attach};
use tonic::Code;
use tonic::transport::Endpoint;
use verge_cloudhub::trust::NodeOwner;
use verge_pki::token::{BootstrapToken, verify_ca_mac};
use verge_pki::{Ca, NodeKey};
use verge_proto::MessageExt;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::join_client::JoinClient;
use verge_proto::hub::{GetCaRequest, JoinRequest, RenewRequest, Taint};

/// A certificate for node A with a hello naming node B is refused; A itself is accepted.
#[tokio::test]
async fn hello_must_name_the_certificates_node() {
    let hub = start(common::config()).await;
    let mut ctrl = attach(&hub, "edgecontroller", &["resource"]).await;
    let status = connect_as(&hub, "node-a", "node-b").await.err().unwrap();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("node-a") && status.message().contains("node-b"));
    assert_eq!(
        hub.trust
            .refusals()
            .identity_mismatch
            .load(Ordering::Relaxed),
        1
    );
    let status = connect_as(&hub, "node-a", "Not_A_Name")
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let mut edge = connect(&hub, "node-a").await;
    let session = ctrl.session().await;
    assert_eq!(session.node, "node-a", "node-b never got a session");
    edge.send(keepalive("k")).await;
    assert_eq!(edge.next().await.unwrap().parent_id(), "k");
    hub.stop().await;
}

/// Plaintext, no client certificate and a certificate from another CA fail in the handshake.
#[tokio::test]
async fn edge_connections_without_a_verge_certificate_are_refused() {
    let hub = start(common::config()).await;
    // Plaintext HTTP/2.
    let plain = Endpoint::from_shared(format!("http://{}", hub.edge_addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2));
    if let Ok(channel) = plain.connect().await {
        let status = EdgeHubClient::new(channel)
            .renew_certificate(RenewRequest { csr: String::new() })
            .await
            .expect_err("plaintext call fails");
        assert_ne!(status.code(), Code::Ok);
    }
    // TLS without a client certificate.
    let refused = tls_channel(&hub, hub.edge_addr, None).await;
    assert_call_fails(refused).await;
    // A certificate from another CA for a valid node name.
    let other = Ca::generate("other-ca", Duration::from_secs(600)).unwrap();
    let foreign = common::node_cert(&other, "node-a");
    let refused = tls_channel(&hub, hub.edge_addr, Some(foreign)).await;
    assert_call_fails(refused).await;
    hub.stop().await;
}

/// A connection that may or may not fail at connect time must fail by the first call.
async fn assert_call_fails(channel: Result<tonic::transport::Channel, tonic::transport::Error>) {
    let Ok(channel) = channel else { return };
    let result = EdgeHubClient::new(channel)
        .renew_certificate(RenewRequest { csr: String::new() })
        .await;
    assert!(result.is_err(), "the call must fail: {result:?}");
}

/// No token, an unknown token and a token of a non-controller user cannot attach.
#[tokio::test]
async fn controllers_need_an_allowed_service_account_token() {
    let hub = start(common::config()).await;
    let status = try_attach(&hub, "x", &["resource"], None)
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let status = try_attach(&hub, "x", &["resource"], Some("forged"))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let status = try_attach(&hub, "x", &["resource"], Some(cluster::STRANGER_TOKEN))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(hub.trust.refusals().controller.load(Ordering::Relaxed), 3);
    attach(&hub, "edgecontroller", &["resource"]).await;
    hub.stop().await;
}

/// With `trust.tokenCaDiscovery`, GetCa answers the CA with the token's MAC over it, read
/// from the token's Secret and checked as for a join (unknown, expired and wrong-usage
/// tokens refused, counted); without it (the default, [`join_with_bootstrap_tokens`]) it
/// reads nothing.
#[tokio::test]
async fn token_ca_discovery_when_enabled() {
    let mut config = common::config();
    config.trust.token_ca_discovery = true;
    let hub = start(config).await;
    let cluster = hub.cluster.clone();
    add_test_tokens(&cluster);
    let channel = tls_channel(&hub, hub.join_addr, None).await.unwrap();
    let mut join = JoinClient::new(channel);
    let get_ca = |token_id: &str| GetCaRequest {
        token_id: token_id.into(),
    };

    let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
    let ca = join.get_ca(get_ca("abcdef")).await.unwrap().into_inner();
    let der = verge_pki::pem_io::cert_from_pem(&ca.ca_certificate).unwrap();
    assert!(verify_ca_mac(&token, &der, &ca.token_mac));
    assert_eq!(ca.ca_certificate, hub.trust.ca().cert_pem());
    let other = BootstrapToken::parse("abcdef.ffffffffffffffff").unwrap();
    assert!(
        !verify_ca_mac(&other, &der, &ca.token_mac),
        "MAC keyed by the secret"
    );

    for (id, says) in [
        ("zzzzzz", "zzzzzz"),
        ("expird", "expired"),
        ("nouse0", "usage"),
    ] {
        let status = join.get_ca(get_ca(id)).await.unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{id}: {status:?}");
        assert!(status.message().contains(says), "{id}: {status:?}");
    }
    assert_eq!(hub.trust.refusals().bad_token.load(Ordering::Relaxed), 3);
    assert_eq!(
        *cluster.secret_reads.lock().unwrap(),
        ["abcdef", "zzzzzz", "expird", "nouse0"]
    );
    hub.stop().await;
}

/// A join with a valid token gets a certificate that EdgeHub accepts, through an approved CSR;
/// bad tokens and foreign nodes are refused before any CSR is recorded.
#[tokio::test]
async fn join_with_bootstrap_tokens() {
    let hub = start(common::config()).await;
    let cluster = hub.cluster.clone();
    add_test_tokens(&cluster);
    cluster
        .nodes
        .lock()
        .unwrap()
        .insert("worker-1".into(), NodeOwner::Foreign);
    let channel = tls_channel(&hub, hub.join_addr, None).await.unwrap();
    let mut join = JoinClient::new(channel);

    // Token CA discovery is off by default (issue 31): GetCa reads no bootstrap-token Secret
    // and tells the edge to pin the CA; joins' tokens go to TokenReviews only.
    let status = join
        .get_ca(GetCaRequest {
            token_id: "abcdef".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status
            .message()
            .contains("CA discovery by bootstrap token is off")
            && status.message().contains("edgeHub.caCertHash"),
        "{status:?}"
    );

    let key = NodeKey::generate().unwrap();
    let request = |token: &str, node: &str| JoinRequest {
        token: token.into(),
        csr: key.csr_pem(node).unwrap(),
        register_with_taints: Vec::new(),
    };
    // Unknown, wrong secret, expired, without usage-bootstrap-authentication: the API
    // server's TokenReview does not authenticate them, and the refusal says so without
    // telling them apart. A static token shaped like a bootstrap token is no bootstrap token.
    for bad in [
        "zzzzzz.0123456789abcdef",
        "abcdef.ffffffffffffffff",
        "expird.0123456789abcdef",
        "nouse0.0123456789abcdef",
        cluster::LOOKALIKE_TOKEN,
    ] {
        let status = join.join_node(request(bad, "edge-9")).await.err().unwrap();
        assert_eq!(status.code(), Code::Unauthenticated, "{bad}: {status:?}");
        let (id, secret) = bad.split_once('.').unwrap();
        assert!(
            status
                .message()
                .contains(&format!("bootstrap token {id:?} refused")),
            "{bad}: {status:?}"
        );
        assert!(
            !status.message().contains(secret),
            "secret printed: {status:?}"
        );
    }
    // Malformed tokens are refused before any TokenReview.
    for malformed in [
        "not-a-token",
        "abcdef.0123456789ABCDEF",
        "abcdefg.0123456789abcdef",
    ] {
        let status = join
            .join_node(request(malformed, "edge-9"))
            .await
            .err()
            .unwrap();
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{malformed}: {status:?}"
        );
        assert!(status.message().contains("malformed"), "{status:?}");
    }
    {
        let reviewed = cluster.bootstrap_reviews.lock().unwrap();
        assert_eq!(
            reviewed.len(),
            5,
            "one review per well-formed bootstrap token: {reviewed:?}"
        );
        assert!(reviewed.iter().all(|t| BootstrapToken::parse(t).is_ok()));
    }
    assert_eq!(hub.trust.refusals().bad_token.load(Ordering::Relaxed), 8);
    assert!(
        cluster.secret_reads.lock().unwrap().is_empty(),
        "a bootstrap-token Secret was read"
    );
    let status = join
        .join_node(request("abcdef.0123456789abcdef", "worker-1"))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        cluster.csrs.lock().unwrap().is_empty(),
        "no CSR for refused joins"
    );

    let joined = join
        .join_node(request("abcdef.0123456789abcdef", "edge-9"))
        .await
        .unwrap()
        .into_inner();
    {
        let csrs = cluster.csrs.lock().unwrap();
        assert_eq!(csrs.len(), 1);
        assert_eq!(csrs[0].0, joined.csr_name);
        assert_eq!(csrs[0].2.as_deref(), Some(joined.certificate.as_str()));
        assert_eq!(
            csrs[0].1.annotations["verge.io/bootstrap-token-id"],
            "abcdef"
        );
    }
    // The joined certificate opens an EdgeHub session for edge-9.
    let identity = (joined.certificate.clone(), key.to_pem());
    let channel = tls_channel(&hub, hub.edge_addr, Some(identity))
        .await
        .unwrap();
    let renewed = EdgeHubClient::new(channel)
        .renew_certificate(RenewRequest {
            csr: NodeKey::generate().unwrap().csr_pem("edge-9").unwrap(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!renewed.certificate.is_empty());
    // Both certificates are bound to the Node the join created.
    let uid = match cluster.nodes.lock().unwrap().get("edge-9") {
        Some(NodeOwner::Edge { uid }) => uid.clone(),
        other => panic!("the join made no edge Node: {other:?}"),
    };
    for pem in [&joined.certificate, &renewed.certificate] {
        let der = verge_pki::pem_io::cert_from_pem(pem).unwrap();
        assert_eq!(
            verge_pki::node_uid(&der).unwrap().as_deref(),
            Some(uid.as_str())
        );
    }

    // A second join under the name is refused (issue 31, weakness 2).
    let status = join
        .join_node(request("abcdef.0123456789abcdef", "edge-9"))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("already joined"), "{status:?}");

    // Deleting the Node revokes the certificate, and so does a Node created again under
    // the name: it has another uid.
    let renew = |identity: (String, verge_pki::PrivateKeyPem)| {
        let hub = &hub;
        async move {
            let channel = tls_channel(hub, hub.edge_addr, Some(identity))
                .await
                .unwrap();
            EdgeHubClient::new(channel)
                .renew_certificate(RenewRequest {
                    csr: NodeKey::generate().unwrap().csr_pem("edge-9").unwrap(),
                })
                .await
        }
    };
    cluster.nodes.lock().unwrap().remove("edge-9");
    let status = renew((joined.certificate.clone(), key.to_pem()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("revoked"), "{status:?}");
    cluster.nodes.lock().unwrap().insert(
        "edge-9".into(),
        NodeOwner::Edge {
            uid: "another-uid".into(),
        },
    );
    let status = renew((joined.certificate.clone(), key.to_pem()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let _ = Arc::strong_count(&hub.trust);
    hub.stop().await;
}

/// A join's registerWithTaints are the taints its Node is created with; an invalid one
/// refuses the join with INVALID_ARGUMENT naming it, and nothing is written. A bad token is
/// refused as such whatever its taints.
#[tokio::test]
async fn join_creates_the_node_with_its_taints() {
    let hub = start(common::config()).await;
    let cluster = hub.cluster.clone();
    cluster.add_token("tnt000", "0123456789abcdef", &["authentication"], None);
    let channel = tls_channel(&hub, hub.join_addr, None).await.unwrap();
    let mut join = JoinClient::new(channel);
    let taint = |key: &str, value: &str, effect: &str| Taint {
        key: key.into(),
        value: value.into(),
        effect: effect.into(),
    };
    let request = |token: &str, node: &str, taints: Vec<Taint>| JoinRequest {
        token: token.into(),
        csr: NodeKey::generate().unwrap().csr_pem(node).unwrap(),
        register_with_taints: taints,
    };

    for (bad, says) in [
        (
            taint("bad key", "", "NoSchedule"),
            "key must be a qualified name",
        ),
        (taint("k", "not ok", "NoSchedule"), "value \"not ok\""),
        (taint("k", "", "Never"), "effect \"Never\""),
        (
            taint("dedicated", "other", "NoSchedule"),
            "unique by key and effect",
        ),
    ] {
        let taints = vec![taint("dedicated", "edge", "NoSchedule"), bad];
        let status = join
            .join_node(request("tnt000.0123456789abcdef", "edge-t", taints))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("taint 1"), "{status:?}");
        assert!(status.message().contains(says), "{says}: {status:?}");
        assert!(
            status.message().contains("edged.registerWithTaints"),
            "{status:?}"
        );
    }
    let too_many = (0..33)
        .map(|i| taint(&format!("k{i}"), "", "NoExecute"))
        .collect();
    let status = join
        .join_node(request("tnt000.0123456789abcdef", "edge-t", too_many))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("at most 32"), "{status:?}");
    // The token is checked first.
    let status = join
        .join_node(request(
            "zzzzzz.0123456789abcdef",
            "edge-t",
            vec![taint("bad key", "", "NoSchedule")],
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(
        cluster.csrs.lock().unwrap().is_empty(),
        "no CSR for refused joins"
    );
    assert!(
        cluster.nodes.lock().unwrap().is_empty(),
        "no Node for refused joins"
    );
    // Refused taints are the edge's configuration, not a credential: not counted.
    assert_eq!(hub.trust.refusals().bad_token.load(Ordering::Relaxed), 1);
    assert_eq!(hub.trust.refusals().bad_csr.load(Ordering::Relaxed), 0);

    let taints = vec![
        taint("dedicated", "edge", "NoSchedule"),
        taint("example.com/flaky-link", "", "PreferNoSchedule"),
        taint("example.com/flaky-link", "", "NoExecute"),
    ];
    join.join_node(request("tnt000.0123456789abcdef", "edge-t", taints))
        .await
        .unwrap();
    let created = cluster.node_taints.lock().unwrap()["edge-t"].clone();
    let created: Vec<_> = created
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
        .collect();
    assert_eq!(
        created,
        [
            ("dedicated", Some("edge"), "NoSchedule"),
            ("example.com/flaky-link", None, "PreferNoSchedule"),
            ("example.com/flaky-link", None, "NoExecute"),
        ]
    );
    // Without taints (an edge older than the field), the Node has none.
    join.join_node(request("tnt000.0123456789abcdef", "edge-u", Vec::new()))
        .await
        .unwrap();
    assert!(cluster.node_taints.lock().unwrap()["edge-u"].is_empty());
    hub.stop().await;
}

/// Bootstrap tokens of the join tests: `abcdef` valid (authentication and signing), `expird`
/// expired, `nouse0` without `usage-bootstrap-authentication`; all with secret
/// `0123456789abcdef`.
fn add_test_tokens(cluster: &common::cluster::FakeCluster) {
    cluster.add_token(
        "abcdef",
        "0123456789abcdef",
        &["authentication", "signing"],
        None,
    );
    cluster.add_token(
        "expird",
        "0123456789abcdef",
        &["authentication"],
        Some("2000-01-01T00:00:00Z"),
    );
    cluster.add_token("nouse0", "0123456789abcdef", &["signing"], None);
}
