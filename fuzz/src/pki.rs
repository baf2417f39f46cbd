//! Target `csr`: bytes → what the cloud reads during a join and what both sides read from
//! certificates: [`CsrRequest::parse_der`] and [`CsrRequest::parse`] (a node's CSR), the
//! signing of an accepted CSR by a CA, [`CertInfo::parse`] and [`verge_pki::node_identity`]
//! (a peer certificate), [`BootstrapToken::parse`] (the `--token` of a join),
//! [`validate_token_secret`] against Secret data made from the input (`key=value` lines),
//! and `parse_ca_hash` (`--ca-cert-hash`).
//!
//! Properties: nothing panics; an accepted CSR names a valid node and is signed by the CA
//! into a certificate whose identity is that node; a parsed token prints back as the input;
//! a granted token carries the bootstrappers group and only valid extra groups.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use verge_pki::token::{BOOTSTRAP_TOKEN_SECRET_TYPE, BOOTSTRAPPERS_GROUP};
use verge_pki::{BootstrapToken, Ca, CertInfo, CsrRequest, Usage, validate_token_secret};

/// A token every Secret made from the input is checked with.
const TOKEN: &str = "abcdef.0123456789abcdef";

/// Checks `data` as DER and, when UTF-8, as PEM and text.
pub fn check(data: &[u8]) {
    if let Ok(csr) = CsrRequest::parse_der(data) {
        accepted(&csr);
    }
    certificate(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(csr) = CsrRequest::parse(text) {
        accepted(&csr);
    }
    if let Ok(token) = BootstrapToken::parse(text) {
        assert_eq!(token.expose().as_str(), text, "token round trip");
        assert!(!format!("{token:?}{token}").contains(token.secret()));
    }
    if let Ok(hash) = verge_pki::hash::parse_ca_hash(text) {
        assert_eq!(verge_pki::hash::parse_ca_hash(&hash).ok(), Some(hash));
    }
    secret(text);
}

/// The CA that signs accepted CSRs (made once per process).
fn ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| {
        Ca::generate("verge-fuzz-ca", Duration::from_secs(86_400)).expect("a CA is generated")
    })
}

/// An accepted CSR is a node's, and signing it yields a certificate of that node.
fn accepted(csr: &CsrRequest) {
    let node = csr.node_name();
    assert!(verge_pki::validate_node_name(node).is_ok(), "{node:?}");
    assert_eq!(
        csr.common_name(),
        format!("{}{node}", verge_pki::NODE_USER_PREFIX)
    );
    assert_eq!(csr.organizations(), [verge_pki::NODES_GROUP]);
    let again = CsrRequest::parse_der(csr.der()).expect("an accepted CSR's DER is accepted");
    assert_eq!(again.node_name(), node);
    let pem = ca()
        .sign_client_csr(csr, Duration::from_secs(3600))
        .expect("an accepted CSR is signed");
    let info = CertInfo::parse(pem.as_bytes()).expect("a signed certificate parses");
    assert!(!info.is_ca);
    let der = verge_pki::pem_io::cert_from_pem(&pem).expect("PEM");
    let identity = verge_pki::node_identity(&der).expect("a node certificate has an identity");
    assert_eq!(identity, node);
}

/// A certificate (PEM or DER) as the TLS layer hands it on.
fn certificate(data: &[u8]) {
    if let Ok(info) = CertInfo::parse(data) {
        let renew = info.renew_at(verge_pki::RENEW_FRACTION);
        if info.not_before <= info.not_after {
            assert!(info.not_before <= renew && renew <= info.not_after);
        }
        let _ = info.check_valid_at(SystemTime::now());
        let _ = info.common_name();
    }
    if let Ok(node) = verge_pki::node_identity(data) {
        assert!(verge_pki::validate_node_name(&node).is_ok(), "{node:?}");
    }
}

/// Secret data from `key=value` lines, checked against [`TOKEN`] for both usages.
fn secret(text: &str) {
    let data: BTreeMap<String, Vec<u8>> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect();
    if data.is_empty() {
        return;
    }
    let token = BootstrapToken::parse(TOKEN).expect("the fixed token parses");
    for usage in [Usage::Authentication, Usage::Signing] {
        let now = SystemTime::now();
        let Ok(grant) =
            validate_token_secret(&token, BOOTSTRAP_TOKEN_SECRET_TYPE, &data, now, usage)
        else {
            continue;
        };
        assert_eq!(grant.token_id, token.id());
        assert_eq!(grant.user, token.user_name());
        assert_eq!(
            grant.groups.first().map(String::as_str),
            Some(BOOTSTRAPPERS_GROUP)
        );
        for group in &grant.groups[1..] {
            assert!(group.starts_with("system:bootstrappers:"), "{group:?}");
        }
        if let Some(expiry) = grant.expiration {
            assert!(expiry > now);
        }
    }
}
