//! A strict check of a CSR's unsigned outer encoding.
//!
//! The CSR signature covers only `certificationRequestInfo`; x509-parser accepts the wrapper
//! around it with wrong tag classes (e.g. an application-class SEQUENCE) or a BIT STRING with
//! unused bits. Such requests carry the same signed content, but they are not DER, and the
//! Kubernetes API server refuses them in `spec.request`. Refusing them here keeps the two in
//! agreement: `CertificationRequest ::= SEQUENCE { info SEQUENCE, signatureAlgorithm
//! SEQUENCE { algorithm OBJECT IDENTIFIER, ... }, signature BIT STRING (no unused bits) }`.

use x509_parser::asn1_rs::{Any, Class, FromDer, Tag};

use super::CsrError;

/// Checks the outer structure; `Err(CsrError::NotDer)` naming the first part that is wrong.
pub(super) fn check(der: &[u8]) -> Result<(), CsrError> {
    let (rest, outer) = element(der, Tag::Sequence, true, "CertificationRequest")?;
    if !rest.is_empty() {
        return Err(CsrError::NotDer {
            part: "bytes after the CertificationRequest",
        });
    }
    let (rest, _info) = element(outer.data, Tag::Sequence, true, "certificationRequestInfo")?;
    let (rest, algorithm) = element(rest, Tag::Sequence, true, "signatureAlgorithm")?;
    element(
        algorithm.data,
        Tag::Oid,
        false,
        "signatureAlgorithm.algorithm",
    )?;
    let (rest, signature) = element(rest, Tag::BitString, false, "signature")?;
    if signature.data.first() != Some(&0) {
        return Err(CsrError::NotDer {
            part: "signature (unused bits)",
        });
    }
    if !rest.is_empty() {
        return Err(CsrError::NotDer {
            part: "bytes after the signature",
        });
    }
    Ok(())
}

/// One universal-class element with the given tag and form.
fn element<'a>(
    input: &'a [u8],
    tag: Tag,
    constructed: bool,
    part: &'static str,
) -> Result<(&'a [u8], Any<'a>), CsrError> {
    let (rest, any) = Any::from_der(input).map_err(|_| CsrError::NotDer { part })?;
    let header = &any.header;
    if header.class() != Class::Universal
        || header.tag() != tag
        || header.is_constructed() != constructed
    {
        return Err(CsrError::NotDer { part });
    }
    Ok((rest, any))
}
