//! [`PrivateKeyPem`]: a PEM private key that is wiped from memory on drop and never printed.

use std::fmt;

use zeroize::Zeroizing;

/// A PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`).
///
/// The text is zeroed when dropped; `Debug` prints `PrivateKeyPem(<redacted>)`, so the key never
/// reaches a log by accident. Read it with [`expose`](Self::expose) only to write it to a
/// 0600 file or a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKeyPem(Zeroizing<String>);

impl PrivateKeyPem {
    /// Wraps PEM text (not checked here; parsing happens where the key is used).
    pub fn new(pem: impl Into<String>) -> Self {
        Self(Zeroizing::new(pem.into()))
    }

    /// The PEM text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKeyPem(<redacted>)")
    }
}

impl From<String> for PrivateKeyPem {
    fn from(pem: String) -> Self {
        Self::new(pem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let key = PrivateKeyPem::new("-----BEGIN PRIVATE KEY-----\nsecret\n");
        assert_eq!(format!("{key:?}"), "PrivateKeyPem(<redacted>)");
        assert!(key.expose().contains("secret"));
    }
}
