//! The CA: generation, PEM round trip, kubeadm hash, issuing.

use ring::digest::{SHA256, digest};
use verge_pki::hash::parse_ca_hash;
use verge_pki::{Ca, CertInfo, Error, PrivateKeyPem, Result, ca_cert_hash, verify_ca_hash};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::{DAY, new_ca};

const OPENSSL_CA: &str = include_str!("../fixtures/openssl-ca.crt");
const OPENSSL_KEY: &str = include_str!("../fixtures/openssl-ca.key");
const OPENSSL_HASH: &str = include_str!("../fixtures/openssl-ca.hash");

#[test]
fn ca_round_trips_through_pem() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    assert!(ca.info().is_ca);
    assert_eq!(ca.info().common_name(), Some("verge-ca"));
    let loaded = Ca::from_pem(ca.cert_pem(), &ca.key_pem())?;
    assert_eq!(loaded.cert_pem(), ca.cert_pem());
    assert_eq!(loaded.cert_hash()?, ca.cert_hash()?);
    // A loaded CA signs certificates that chain to the original.
    let served = loaded.issue_serving("cloudhub", &["cloudhub.verge".to_owned()], DAY)?;
    assert_eq!(served.ca_pem, ca.cert_pem());
    // The key is never printed.
    assert!(!format!("{ca:?}").contains("PRIVATE"));
    assert!(!format!("{:?}", ca.key_pem()).contains("PRIVATE"));
    Ok(())
}

#[test]
fn hash_matches_openssl_and_an_independent_spki_digest() -> Result<()> {
    let ca = Ca::from_pem(OPENSSL_CA, &PrivateKeyPem::new(OPENSSL_KEY))?;
    assert_eq!(ca.cert_hash()?, OPENSSL_HASH.trim());
    assert_eq!(ca_cert_hash(OPENSSL_CA)?, OPENSSL_HASH.trim());
    // A CA Verge did not make issues certificates that chain to it.
    let (node_pem, _) = crate::node_cert(&ca, "edge-1")?;
    assert_eq!(
        verge_pki::node_identity(&verge_pki::pem_io::cert_from_pem(&node_pem)?)?,
        "edge-1"
    );

    // Independently: SHA-256 over x509-parser's raw SubjectPublicKeyInfo bytes.
    let own = new_ca("verge-ca")?;
    let (_, parsed) = X509Certificate::from_der(own.cert_der()).map_err(|_| Error::NotACa)?;
    let hex: String = digest(&SHA256, parsed.public_key().raw)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(own.cert_hash()?, format!("sha256:{hex}"));
    // Stable: the same certificate always hashes the same.
    assert_eq!(own.cert_hash()?, ca_cert_hash(own.cert_pem())?);
    Ok(())
}

#[test]
fn wrong_or_malformed_hash_is_refused() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let other = new_ca("other-ca")?;
    verify_ca_hash(ca.cert_pem(), &ca.cert_hash()?)?;
    // Upper-case hex as typed by an operator is accepted.
    verify_ca_hash(
        ca.cert_pem(),
        &ca.cert_hash()?.to_uppercase().replace("SHA256", "sha256"),
    )?;
    assert!(matches!(
        verify_ca_hash(ca.cert_pem(), &other.cert_hash()?),
        Err(Error::CaHashMismatch { .. })
    ));
    assert!(matches!(
        verify_ca_hash(ca.cert_pem(), "sha256:1234"),
        Err(Error::MalformedCaHash { .. })
    ));
    assert!(parse_ca_hash(&ca.cert_hash()?).is_ok());
    Ok(())
}

#[test]
fn loading_refuses_non_ca_and_foreign_keys() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let other = new_ca("other-ca")?;
    assert!(matches!(
        Ca::from_pem(ca.cert_pem(), &other.key_pem()),
        Err(Error::KeyMismatch)
    ));
    let leaf = ca.issue_client("controller", None, DAY)?;
    assert!(matches!(
        Ca::from_pem(&leaf.cert_pem, &leaf.key_pem),
        Err(Error::NotACa)
    ));
    assert!(matches!(
        Ca::from_pem("", &ca.key_pem()),
        Err(Error::NoPem { .. })
    ));
    Ok(())
}

#[test]
fn serving_certificates_carry_sans_and_validity() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let sans = [
        "cloudhub.verge.svc".to_owned(),
        "10.0.0.7".to_owned(),
        "::1".to_owned(),
    ];
    let served = ca.issue_serving("cloudhub", &sans, 90 * DAY)?;
    let der = verge_pki::pem_io::cert_from_pem(&served.cert_pem)?;
    let (_, cert) = X509Certificate::from_der(&der).map_err(|_| Error::NotACa)?;
    let san = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|s| format!("{:?}", s.value));
    let san = san.unwrap_or_default();
    assert!(san.contains(r#"DNSName("cloudhub.verge.svc")"#), "{san}");
    assert!(san.contains("IPAddress([10, 0, 0, 7])"), "{san}");
    let eku = cert
        .extended_key_usage()
        .ok()
        .flatten()
        .map(|e| (e.value.server_auth, e.value.client_auth));
    assert_eq!(eku, Some((true, false)));

    let info = CertInfo::parse(served.cert_pem.as_bytes())?;
    let lifetime = info.lifetime().as_secs();
    assert!(
        (90 * 24 * 3600..=90 * 24 * 3600 + 301).contains(&lifetime),
        "{lifetime}"
    );
    assert!(!info.is_ca);

    assert!(matches!(
        ca.issue_serving("x", &[], DAY),
        Err(Error::NoSubjectAltNames)
    ));
    assert!(matches!(
        ca.issue_serving("x", &["bad name!".to_owned()], DAY),
        Err(Error::InvalidSubjectAltName { .. })
    ));
    assert!(matches!(
        ca.issue_serving("x", &["a.b".to_owned()], std::time::Duration::ZERO),
        Err(Error::InvalidValidity { .. })
    ));
    Ok(())
}

#[test]
fn certificates_never_outlive_their_ca() -> Result<()> {
    let ca = Ca::generate("short-ca", 2 * DAY)?;
    let leaf = ca.issue_client("controller", Some("verge:controllers"), 365 * DAY)?;
    let info = CertInfo::parse(leaf.cert_pem.as_bytes())?;
    assert_eq!(info.not_after, ca.info().not_after);
    assert_eq!(info.organizations, ["verge:controllers"]);
    assert_eq!(info.common_name(), Some("controller"));
    Ok(())
}
