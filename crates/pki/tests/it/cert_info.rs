//! Reading certificates: validity, renewal time, node identity.

use std::time::{Duration, SystemTime};

use rand::SeedableRng;
use verge_pki::{CertInfo, Error, RENEW_FRACTION, Result, SubjectError, node_identity};

use crate::{DAY, new_ca, node_cert};

#[test]
fn renewal_falls_at_the_chosen_fraction() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let (pem, _) = node_cert(&ca, "edge-1")?;
    let info = CertInfo::parse(pem.as_bytes())?;
    let lifetime = info.lifetime();
    assert_eq!(
        info.renew_at(RENEW_FRACTION),
        info.not_before + lifetime.mul_f64(0.8)
    );
    assert_eq!(info.renew_at(0.0), info.not_before);
    assert_eq!(info.renew_at(7.0), info.not_after);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..100 {
        let at = info.renew_at_jittered(&mut rng);
        assert!(at >= info.renew_at(0.7) && at <= info.renew_at(0.9));
    }
    Ok(())
}

#[test]
fn validity_checks_carry_the_times() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let (pem, _) = node_cert(&ca, "edge-1")?;
    let info = CertInfo::parse(pem.as_bytes())?;
    info.check_valid_at(SystemTime::now())?;
    let later = info.not_after + Duration::from_secs(1);
    match info.check_valid_at(later) {
        Err(e @ Error::Expired { not_after }) => {
            assert_eq!(not_after, info.not_after);
            assert!(e.to_string().starts_with("certificate expired at "), "{e}");
        }
        other => panic!("expected Expired, got {other:?}"),
    }
    assert!(matches!(
        info.check_valid_at(info.not_before - Duration::from_secs(1)),
        Err(Error::NotYetValid { .. })
    ));
    // The same certificate parses from DER.
    let der = verge_pki::pem_io::cert_from_pem(&pem)?;
    assert_eq!(CertInfo::parse(&der)?, info);
    assert!(matches!(
        CertInfo::parse(b"garbage"),
        Err(Error::Certificate(_))
    ));
    Ok(())
}

#[test]
fn node_identity_needs_node_cn_and_nodes_group() -> Result<()> {
    let ca = new_ca("verge-ca")?;
    let (pem, _) = node_cert(&ca, "edge-1")?;
    let der = verge_pki::pem_io::cert_from_pem(&pem)?;
    assert_eq!(node_identity(&der)?, "edge-1");

    let controller = ca.issue_client("edgecontroller", Some("verge:controllers"), DAY)?;
    let der = verge_pki::pem_io::cert_from_pem(&controller.cert_pem)?;
    assert!(matches!(
        node_identity(&der),
        Err(Error::NotANode(SubjectError::NotANodeUser { .. }))
    ));
    // The right CN without the group is not a node.
    let pretender = ca.issue_client("system:node:edge-1", Some("verge:controllers"), DAY)?;
    let der = verge_pki::pem_io::cert_from_pem(&pretender.cert_pem)?;
    assert!(matches!(
        node_identity(&der),
        Err(Error::NotANode(SubjectError::NotInNodesGroup { .. }))
    ));
    Ok(())
}
