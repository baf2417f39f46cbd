//! Validity windows of issued certificates and time conversions.
//!
//! Every certificate starts [`BACKDATE`] before "now" so that a peer whose clock is slightly
//! behind accepts it at once (the Kubernetes CSR signer and kubeadm backdate by the same
//! 5 minutes), and ends `validity` after "now", capped at the CA's own `notAfter` (as the
//! Kubernetes signer caps a certificate at its CA's expiry).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::CertificateParams;
use time::OffsetDateTime;

use crate::error::{Error, Result};

/// How far before "now" an issued certificate's `notBefore` is set (clock skew allowance).
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Sets `not_before`/`not_after` of `params` for a certificate valid `validity` from `now`,
/// never past `cap` (the issuer's `notAfter`) when given.
///
/// # Errors
/// [`Error::InvalidValidity`] for a zero or unrepresentable validity, [`Error::Expired`] when
/// the cap is already past.
pub(crate) fn apply(
    params: &mut CertificateParams,
    now: SystemTime,
    validity: Duration,
    cap: Option<SystemTime>,
) -> Result<()> {
    let invalid = || Error::InvalidValidity { validity };
    if validity.is_zero() {
        return Err(invalid());
    }
    let not_before = now.checked_sub(BACKDATE).ok_or_else(invalid)?;
    let mut not_after = now.checked_add(validity).ok_or_else(invalid)?;
    if let Some(cap) = cap {
        if cap <= now {
            return Err(Error::Expired { not_after: cap });
        }
        not_after = not_after.min(cap);
    }
    params.not_before = to_offset(not_before).ok_or_else(invalid)?;
    params.not_after = to_offset(not_after).ok_or_else(invalid)?;
    Ok(())
}

/// Converts to rcgen's time type; `None` outside the range X.509 can encode.
fn to_offset(t: SystemTime) -> Option<OffsetDateTime> {
    let secs = i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?;
    let dt = OffsetDateTime::from_unix_timestamp(secs).ok()?;
    // X.509 times end at 9999-12-31 (GeneralizedTime with four-digit years).
    (dt.year() <= 9999).then_some(dt)
}

/// Converts X.509 seconds since the epoch (may be negative) into a `SystemTime`.
pub(crate) fn from_unix(secs: i64) -> SystemTime {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// Formats a time as RFC 3339 in UTC (`2025-01-31T12:00:00Z`) for error messages.
pub fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn window(params: &CertificateParams) -> (i64, i64) {
        (
            params.not_before.unix_timestamp(),
            params.not_after.unix_timestamp(),
        )
    }

    #[test]
    fn windows_are_backdated_and_capped() -> Result<()> {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut params = CertificateParams::default();
        apply(&mut params, now, DAY, None)?;
        assert_eq!(
            window(&params),
            (1_700_000_000 - 300, 1_700_000_000 + 86_400)
        );
        apply(&mut params, now, 10 * DAY, Some(now + DAY))?;
        assert_eq!(window(&params).1, 1_700_000_000 + 86_400);
        Ok(())
    }

    #[test]
    fn bad_windows_are_refused() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut params = CertificateParams::default();
        assert!(matches!(
            apply(&mut params, now, Duration::ZERO, None),
            Err(Error::InvalidValidity { .. })
        ));
        assert!(matches!(
            apply(&mut params, now, Duration::from_secs(u64::MAX / 2), None),
            Err(Error::InvalidValidity { .. })
        ));
        // An expired CA issues nothing; the error names when it expired.
        assert!(matches!(
            apply(&mut params, now, DAY, Some(now - DAY)),
            Err(Error::Expired { not_after }) if not_after == now - DAY
        ));
    }

    #[test]
    fn times_format_as_rfc3339_utc() {
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_599_971_950)),
            "2020-09-13T04:39:10Z"
        );
        assert_eq!(from_unix(-1), UNIX_EPOCH - Duration::from_secs(1));
    }
}
