//! Kubernetes bootstrap tokens (`<id>.<secret>`, kept in `bootstrap.kubernetes.io/token`
//! Secrets named `bootstrap-token-<id>` in `kube-system`, the format kubeadm creates), and the
//! checks the Kubernetes bootstrap-token authenticator applies before a join is allowed.
//!
//! - [`BootstrapToken`]: the token a node is given; never printed with its secret.
//! - [`validate_token_secret`] (in `validate`): checks a token against its Secret's type and
//!   data and returns the [`TokenGrant`] (user and groups) or a [`TokenError`].

use std::fmt;

use rand::Rng;
use zeroize::Zeroizing;

mod discovery;
mod validate;

pub use discovery::{ca_mac, verify_ca_mac};
pub use validate::{TokenError, TokenGrant, Usage, validate_token_secret};

/// The Secret type of bootstrap tokens.
pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The namespace bootstrap-token Secrets live in.
pub const BOOTSTRAP_TOKEN_NAMESPACE: &str = "kube-system";
/// Prefix of a bootstrap-token Secret's name (`bootstrap-token-<id>`).
pub const BOOTSTRAP_TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
/// Secret data key of the token id.
pub const TOKEN_ID_KEY: &str = "token-id";
/// Secret data key of the token secret.
pub const TOKEN_SECRET_KEY: &str = "token-secret";
/// Secret data key of the optional expiry time (RFC 3339).
pub const EXPIRATION_KEY: &str = "expiration";
/// Secret data key of the optional comma-separated extra groups.
pub const AUTH_EXTRA_GROUPS_KEY: &str = "auth-extra-groups";
/// Secret data key of the optional human description.
pub const DESCRIPTION_KEY: &str = "description";
/// The group every bootstrap-token user is in.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// Required prefix of every extra group.
pub const BOOTSTRAPPERS_GROUP_PREFIX: &str = "system:bootstrappers:";
/// Prefix of the user a token authenticates as (`system:bootstrap:<id>`).
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";

const ID_LEN: usize = 6;
const SECRET_LEN: usize = 16;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A bootstrap token `<id>.<secret>`: id `[a-z0-9]{6}` (public, names the Secret), secret
/// `[a-z0-9]{16}` (private).
///
/// `Debug` and `Display` show only the id (`abcdef.<redacted>`); the secret is zeroed on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: Zeroizing<String>,
}

impl BootstrapToken {
    /// Parses `<id>.<secret>`.
    ///
    /// # Errors
    /// [`TokenError::Malformed`] (which never contains the input).
    pub fn parse(token: &str) -> Result<Self, TokenError> {
        let (id, secret) = token.split_once('.').ok_or(TokenError::Malformed {
            reason: "expected <id>.<secret> with a 6-character id and a 16-character secret",
        })?;
        if !is_token_part(id, ID_LEN) {
            return Err(TokenError::Malformed {
                reason: "the token id must be 6 characters [a-z0-9]",
            });
        }
        if !is_token_part(secret, SECRET_LEN) {
            return Err(TokenError::Malformed {
                reason: "the token secret must be 16 characters [a-z0-9]",
            });
        }
        Ok(Self {
            id: id.to_owned(),
            secret: Zeroizing::new(secret.to_owned()),
        })
    }

    /// A new random token (as `kubeadm token generate` makes).
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        let mut part = |len: usize| -> String {
            (0..len)
                .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
                .collect()
        };
        let id = part(ID_LEN);
        let secret = Zeroizing::new(part(SECRET_LEN));
        Self { id, secret }
    }

    /// The public token id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The private token secret. Send it only over a TLS connection to a pinned CA.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token `<id>.<secret>`, e.g. to send in a join request.
    pub fn expose(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{}.{}", self.id, self.secret.as_str()))
    }

    /// The name of the token's Secret, `bootstrap-token-<id>` (in [`BOOTSTRAP_TOKEN_NAMESPACE`]).
    pub fn secret_name(&self) -> String {
        format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{}", self.id)
    }

    /// The user the token authenticates as, `system:bootstrap:<id>`.
    pub fn user_name(&self) -> String {
        format!("{BOOTSTRAP_USER_PREFIX}{}", self.id)
    }
}

fn is_token_part(part: &str, len: usize) -> bool {
    part.len() == len
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.<redacted>", self.id)
    }
}

impl std::str::FromStr for BootstrapToken {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}
