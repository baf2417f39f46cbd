//! Checking a bootstrap token against its Secret, as the Kubernetes bootstrap-token
//! authenticator does: type, id and secret (constant time), expiry, usage, extra groups.

use std::collections::BTreeMap;
use std::time::SystemTime;

use subtle::ConstantTimeEq;

use super::{
    AUTH_EXTRA_GROUPS_KEY, BOOTSTRAP_TOKEN_SECRET_TYPE, BOOTSTRAPPERS_GROUP,
    BOOTSTRAPPERS_GROUP_PREFIX, BootstrapToken, EXPIRATION_KEY, TOKEN_ID_KEY, TOKEN_SECRET_KEY,
};
use crate::validity::rfc3339;

/// What the token must be allowed for (a `usage-bootstrap-<usage>: "true"` Secret key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// `usage-bootstrap-authentication`: authenticate a join.
    Authentication,
    /// `usage-bootstrap-signing`: sign discovery information.
    Signing,
}

impl Usage {
    /// The Secret data key of this usage.
    pub fn key(self) -> &'static str {
        match self {
            Self::Authentication => "usage-bootstrap-authentication",
            Self::Signing => "usage-bootstrap-signing",
        }
    }
}

/// Who a valid token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    /// The token id.
    pub token_id: String,
    /// `system:bootstrap:<id>`.
    pub user: String,
    /// `system:bootstrappers` followed by the Secret's extra groups, in order, without
    /// duplicates.
    pub groups: Vec<String>,
    /// When the token expires, if it does.
    pub expiration: Option<SystemTime>,
}

/// Why a bootstrap token was refused. The messages are for the cloud's log; what a caller
/// tells the joining client is its choice (Kubernetes answers every case with a plain 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token or its Secret is not in the bootstrap-token format.
    #[error("malformed bootstrap token: {reason}")]
    Malformed {
        /// What is wrong (never the secret).
        reason: &'static str,
    },
    /// No bootstrap-token Secret exists for the id (the caller maps a missing Secret, or one
    /// being deleted, to this), or the Secret has another type.
    #[error(
        "unknown bootstrap token {token_id:?}: no Secret bootstrap-token-{token_id} of type {BOOTSTRAP_TOKEN_SECRET_TYPE} in kube-system"
    )]
    Unknown {
        /// The token id.
        token_id: String,
    },
    /// The token expired.
    #[error("bootstrap token {token_id:?} expired at {}; create a new one (e.g. kubeadm token create)", rfc3339(*expired_at))]
    Expired {
        /// The token id.
        token_id: String,
        /// The Secret's `expiration`.
        expired_at: SystemTime,
    },
    /// The token is not allowed for the requested usage.
    #[error(
        "bootstrap token {token_id:?} may not be used for this: its Secret lacks {key}: \"true\""
    )]
    WrongUsage {
        /// The token id.
        token_id: String,
        /// The usage key that is missing or not `"true"`.
        key: &'static str,
    },
    /// The secret (or the Secret's `token-id`) does not match the token.
    #[error("bootstrap token {token_id:?} does not match its Secret")]
    Mismatch {
        /// The token id.
        token_id: String,
    },
    /// An extra group does not start with `system:bootstrappers:` or has invalid characters.
    #[error(
        "bootstrap token {token_id:?} has an invalid auth-extra-groups entry {group:?}: each must match system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]"
    )]
    BadGroups {
        /// The token id.
        token_id: String,
        /// The offending group.
        group: String,
    },
}

/// Checks `token` against its Secret (`secret_type` and `data` of
/// `kube-system/bootstrap-token-<id>`) at time `now` for `usage`.
///
/// Checks, in order: the type is `bootstrap.kubernetes.io/token` ([`TokenError::Unknown`]);
/// `token-secret` then `token-id` equal the token's, compared in constant time
/// ([`TokenError::Mismatch`]; missing keys are [`TokenError::Malformed`]); `expiration`, when
/// present, is RFC 3339 ([`TokenError::Malformed`]) and after `now` ([`TokenError::Expired`]);
/// `usage-bootstrap-<usage>` is `"true"` ([`TokenError::WrongUsage`]); every comma-separated
/// `auth-extra-groups` entry matches `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`
/// ([`TokenError::BadGroups`]). Call it once per usage needed.
///
/// # Errors
/// The [`TokenError`] of the first failed check.
pub fn validate_token_secret(
    token: &BootstrapToken,
    secret_type: &str,
    data: &BTreeMap<String, Vec<u8>>,
    now: SystemTime,
    usage: Usage,
) -> Result<TokenGrant, TokenError> {
    let token_id = token.id().to_owned();
    if secret_type != BOOTSTRAP_TOKEN_SECRET_TYPE {
        return Err(TokenError::Unknown { token_id });
    }
    let stored_secret = data.get(TOKEN_SECRET_KEY).ok_or(TokenError::Malformed {
        reason: "the Secret has no token-secret",
    })?;
    let stored_id = data.get(TOKEN_ID_KEY).ok_or(TokenError::Malformed {
        reason: "the Secret has no token-id",
    })?;
    let secret_ok = stored_secret.as_slice().ct_eq(token.secret().as_bytes());
    let id_ok = stored_id.as_slice().ct_eq(token.id().as_bytes());
    if !bool::from(secret_ok & id_ok) {
        return Err(TokenError::Mismatch { token_id });
    }

    let expiration = match data.get(EXPIRATION_KEY) {
        None => None,
        Some(raw) => {
            let text = std::str::from_utf8(raw).map_err(|_| TokenError::Malformed {
                reason: "the Secret's expiration is not UTF-8",
            })?;
            let at = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|_| {
                TokenError::Malformed {
                    reason: "the Secret's expiration is not an RFC 3339 time",
                }
            })?;
            let at = SystemTime::from(at.with_timezone(&chrono::Utc));
            if at <= now {
                return Err(TokenError::Expired {
                    token_id,
                    expired_at: at,
                });
            }
            Some(at)
        }
    };

    if data.get(usage.key()).map(Vec::as_slice) != Some(b"true".as_slice()) {
        return Err(TokenError::WrongUsage {
            token_id,
            key: usage.key(),
        });
    }

    let mut groups = vec![BOOTSTRAPPERS_GROUP.to_owned()];
    // As Kubernetes: an absent or empty value means no extra groups; otherwise every
    // comma-separated entry (no trimming) must be valid.
    if let Some(raw) = data
        .get(AUTH_EXTRA_GROUPS_KEY)
        .filter(|raw| !raw.is_empty())
    {
        let text = String::from_utf8_lossy(raw);
        for group in text.split(',') {
            if !is_bootstrap_group(group) {
                return Err(TokenError::BadGroups {
                    token_id,
                    group: group.to_owned(),
                });
            }
            if !groups.iter().any(|g| g == group) {
                groups.push(group.to_owned());
            }
        }
    }

    Ok(TokenGrant {
        user: token.user_name(),
        token_id,
        groups,
        expiration,
    })
}

/// `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`.
fn is_bootstrap_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix(BOOTSTRAPPERS_GROUP_PREFIX) else {
        return false;
    };
    let bytes = rest.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b':' || *b == b'-';
    let Some((last, body)) = bytes.split_last() else {
        return false;
    };
    body.len() <= 255
        && body.iter().all(allowed)
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
}
