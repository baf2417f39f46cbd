//! Node CSRs: made on the edge, checked and signed in the cloud.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use verge_pki::{CertInfo, CsrError, CsrRequest, Error, NodeKey, Result, SubjectError};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::{DAY, new_ca};

/// A CSR with the given subject (and optional SAN / CA request) signed by a fresh key.
fn csr(subject: &[(DnType, &str)], sans: Vec<SanType>, ca: bool) -> Result<String> {
    let key = KeyPair::generate().map_err(|source| Error::Rcgen {
        action: "test key",
        source,
    })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    for (ty, value) in subject {
        params.distinguished_name.push(ty.clone(), *value);
    }
    params.subject_alt_names = sans;
    if ca {
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let request = params
        .serialize_request(&key)
        .map_err(|source| Error::Rcgen {
            action: "test csr",
            source,
        })?;
    request.pem().map_err(|source| Error::Rcgen {
        action: "test csr pem",
        source,
    })
}

fn cn(value: &str) -> (DnType, &str) {
    (DnType::CommonName, value)
}

fn org(value: &str) -> (DnType, &str) {
    (DnType::OrganizationName, value)
}

#[test]
fn node_csr_is_parsed_and_signed_with_the_node_key() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let key = NodeKey::generate()?;
    let request = CsrRequest::parse(&key.csr_pem("edge-1")?)?;
    assert_eq!(request.node_name(), "edge-1");
    assert_eq!(request.common_name(), "system:node:edge-1");
    assert_eq!(request.organizations(), ["system:nodes"]);
    assert_eq!(CsrRequest::parse_der(request.der())?.node_name(), "edge-1");

    let cert_pem = ca.sign_client_csr(&request, 30 * DAY)?;
    let info = CertInfo::parse(cert_pem.as_bytes())?;
    assert_eq!(info.common_names, ["system:node:edge-1"]);
    assert_eq!(info.organizations, ["system:nodes"]);
    assert!(!info.is_ca);
    let der = verge_pki::pem_io::cert_from_pem(&cert_pem)?;
    let (_, cert) = X509Certificate::from_der(&der).map_err(|_| Error::NotACa)?;
    // The certificate holds the node's public key: the private key never left the node.
    assert_eq!(cert.public_key().raw, key.public_key_der().as_slice());
    // clientAuth only, whatever the CSR asked for.
    let eku = cert
        .extended_key_usage()
        .ok()
        .flatten()
        .map(|e| (e.value.client_auth, e.value.server_auth));
    assert_eq!(eku, Some((true, false)));
    Ok(())
}

#[test]
fn a_node_certificate_is_bound_to_its_node_uid() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let key = NodeKey::generate()?;
    let request = CsrRequest::parse(&key.csr_pem("edge-1")?)?;
    let uid = "6f1c2a9e-0b7d-4c55-9e8a-3d2f1b0c4e77";
    let bound = ca.sign_node_csr(&request, uid, 30 * DAY)?;
    let der = verge_pki::pem_io::cert_from_pem(&bound)?;
    assert_eq!(verge_pki::node_uid(&der)?.as_deref(), Some(uid));
    assert_eq!(verge_pki::node_identity(&der)?, "edge-1");
    // Unbound certificates have none.
    let unbound = ca.sign_client_csr(&request, 30 * DAY)?;
    let der = verge_pki::pem_io::cert_from_pem(&unbound)?;
    assert_eq!(verge_pki::node_uid(&der)?, None);
    // A uid that is not a Kubernetes uid is refused.
    for bad in ["", "a b", "x/../y", &"a".repeat(65)] {
        assert!(
            matches!(
                ca.sign_node_csr(&request, bad, DAY),
                Err(Error::InvalidNodeUid(_))
            ),
            "{bad:?}"
        );
    }
    Ok(())
}

#[test]
fn a_valid_subject_from_a_foreign_tool_is_accepted() -> Result<()> {
    let pem = csr(
        &[org("system:nodes"), cn("system:node:edge.site-2")],
        vec![],
        false,
    )?;
    assert_eq!(CsrRequest::parse(&pem)?.node_name(), "edge.site-2");
    Ok(())
}

#[test]
fn non_node_subjects_are_refused() -> Result<()> {
    let nodes = org("system:nodes");
    let cases: Vec<(&str, String)> = vec![
        ("admin", csr(&[nodes.clone(), cn("admin")], vec![], false)?),
        (
            "empty node name",
            csr(&[nodes.clone(), cn("system:node:")], vec![], false)?,
        ),
        (
            "bad node name",
            csr(&[nodes.clone(), cn("system:node:Bad_Name")], vec![], false)?,
        ),
        ("no CN", csr(std::slice::from_ref(&nodes), vec![], false)?),
    ];
    for (what, pem) in cases {
        assert!(
            matches!(CsrRequest::parse(&pem), Err(CsrError::Subject(_))),
            "{what}"
        );
    }
    let two_cns = csr(
        &[
            nodes.clone(),
            cn("system:node:a"),
            (DnType::CustomDnType(vec![2, 5, 4, 3]), "system:node:b"),
        ],
        vec![],
        false,
    )?;
    assert!(matches!(
        CsrRequest::parse(&two_cns),
        Err(CsrError::Subject(SubjectError::SeveralCommonNames {
            count: 2
        }))
    ));
    Ok(())
}

#[test]
fn organizations_must_be_exactly_system_nodes() -> Result<()> {
    let name = cn("system:node:edge-1");
    for subject in [
        vec![name.clone()],
        vec![org("system:masters"), name.clone()],
        vec![
            org("system:nodes"),
            (DnType::CustomDnType(vec![2, 5, 4, 10]), "system:masters"),
            name.clone(),
        ],
    ] {
        assert!(
            matches!(
                CsrRequest::parse(&csr(&subject, vec![], false)?),
                Err(CsrError::Organizations { .. })
            ),
            "{subject:?}"
        );
    }
    let with_ou = csr(
        &[
            org("system:nodes"),
            (DnType::OrganizationalUnitName, "x"),
            name,
        ],
        vec![],
        false,
    )?;
    assert!(matches!(
        CsrRequest::parse(&with_ou),
        Err(CsrError::SubjectAttribute { .. })
    ));
    Ok(())
}

#[test]
fn sans_and_ca_requests_are_refused() -> Result<()> {
    let subject = [org("system:nodes"), cn("system:node:edge-1")];
    let dns = SanType::DnsName("cloudhub.verge".try_into().map_err(|source| Error::Rcgen {
        action: "san",
        source,
    })?);
    assert!(matches!(
        CsrRequest::parse(&csr(&subject, vec![dns], false)?),
        Err(CsrError::SubjectAltNames)
    ));
    assert!(matches!(
        CsrRequest::parse(&csr(&subject, vec![], true)?),
        Err(CsrError::CaRequested)
    ));
    Ok(())
}

#[test]
fn tampered_and_garbage_csrs_are_refused() -> Result<()> {
    let key = NodeKey::generate()?;
    let pem = key.csr_pem("edge-1")?;
    let der = CsrRequest::parse(&pem)?.der().to_vec();
    // Rename the node inside the signed bytes: the signature no longer verifies.
    let at = der
        .windows(6)
        .position(|w| w == b"edge-1")
        .ok_or(Error::NotACa)?;
    let mut tampered = der.clone();
    tampered[at + 5] = b'2';
    assert!(matches!(
        CsrRequest::parse_der(&tampered),
        Err(CsrError::Signature(_))
    ));
    let mut trailing = der;
    trailing.push(0);
    assert!(matches!(
        CsrRequest::parse_der(&trailing),
        Err(CsrError::NotDer { .. })
    ));
    // Outside the signed part: an application-class outer SEQUENCE is not DER.
    let mut wrong_class = CsrRequest::parse(&pem)?.der().to_vec();
    wrong_class[0] = 0x70;
    assert!(matches!(
        CsrRequest::parse_der(&wrong_class),
        Err(CsrError::NotDer { .. })
    ));
    assert!(matches!(
        CsrRequest::parse("not a csr"),
        Err(CsrError::Pem(_))
    ));
    assert!(matches!(
        CsrRequest::parse_der(b"\x30\x03\x02\x01\x00"),
        Err(CsrError::Malformed(_))
    ));
    Ok(())
}

#[test]
fn mutated_csrs_are_refused_without_panicking() -> Result<()> {
    use rand::{Rng, SeedableRng};

    let der = CsrRequest::parse(&NodeKey::generate()?.csr_pem("edge-1")?)?
        .der()
        .to_vec();
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    for _ in 0..5000 {
        let mut mutated = der.clone();
        for _ in 0..rng.random_range(1..4) {
            if mutated.is_empty() {
                break;
            }
            let at = rng.random_range(0..mutated.len());
            match rng.random_range(0..3) {
                0 => mutated[at] ^= 1 << rng.random_range(0..8),
                1 => mutated[at] = rng.random(),
                _ => mutated.truncate(at),
            }
        }
        // Any change to a signed CSR must be refused (truncation included).
        if mutated != der {
            assert!(CsrRequest::parse_der(&mutated).is_err(), "{mutated:02x?}");
        }
    }
    Ok(())
}
