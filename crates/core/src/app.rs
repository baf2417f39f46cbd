//! Names of third parties' message groups and resource types (architecture.md §11): a controller
//! that is not Verge's own serves an [`AppGroup`], and its messages name resources of [`AppType`]s
//! that only it and its edge apps know. Both are stored inline (at most 63 bytes), so
//! [`crate::Group`] and [`crate::ResourceType`] stay `Copy`.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// Longest group or type name, in bytes (a DNS label's limit; both appear in MQTT topics).
pub const MAX_NAME_LEN: usize = 63;

/// A validated lower-case ASCII name of at most [`MAX_NAME_LEN`] bytes, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct InlineName {
    len: u8,
    bytes: [u8; MAX_NAME_LEN],
}

impl InlineName {
    /// `s`, which the caller checked to be ASCII of at most [`MAX_NAME_LEN`] bytes.
    fn new(s: &str) -> Self {
        let mut bytes = [0; MAX_NAME_LEN];
        let len = s.len().min(MAX_NAME_LEN);
        bytes[..len].copy_from_slice(&s.as_bytes()[..len]);
        Self {
            len: u8::try_from(len).unwrap_or(u8::MAX),
            bytes,
        }
    }

    fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// Whether `label` is an RFC 1123 label: `a-z`, `0-9` and `-`, neither starting nor ending
/// with `-`, not empty.
fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The name of a third party's message group: a lower-case DNS subdomain (RFC 1123 labels
/// joined by dots) with at least one dot, at most [`MAX_NAME_LEN`] bytes, neither
/// `verge.io` nor under it (reserved for Verge), e.g. `robots.example.com`: the convention
/// of Kubernetes API groups, so Verge's one-word groups never collide with a third party's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppGroup(InlineName);

impl AppGroup {
    /// The name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for AppGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppGroup({:?})", self.as_str())
    }
}

impl FromStr for AppGroup {
    type Err = Error;

    /// # Errors
    /// [`Error::InvalidGroup`] naming what is wrong.
    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: &'static str| Error::InvalidGroup {
            group: s.chars().take(MAX_NAME_LEN + 8).collect(),
            reason,
        };
        if s.len() > MAX_NAME_LEN {
            return Err(invalid("longer than 63 characters"));
        }
        if !s.contains('.') {
            return Err(invalid(
                "a third-party group needs a dot (e.g. robots.example.com)",
            ));
        }
        if !s.split('.').all(is_dns_label) {
            return Err(invalid(
                "not a lower-case DNS subdomain (labels of a-z, 0-9 and '-', joined by dots)",
            ));
        }
        if s == "verge.io" || s.ends_with(".verge.io") {
            return Err(invalid(
                "verge.io and its subdomains are reserved for Verge",
            ));
        }
        Ok(Self(InlineName::new(s)))
    }
}

/// A resource type of a third-party group (`<namespace>/<type>/<name>` of its messages): an
/// RFC 1123 label (`a-z`, `0-9`, `-`, at most [`MAX_NAME_LEN`] bytes) that is not one of
/// Verge's own types, e.g. `robot`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppType(InlineName);

impl AppType {
    /// `s` when it is an RFC 1123 label of at most [`MAX_NAME_LEN`] bytes (the caller has
    /// ruled out Verge's own type names).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        (s.len() <= MAX_NAME_LEN && is_dns_label(s)).then(|| Self(InlineName::new(s)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for AppType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppType({:?})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_types_are_dns_labels() {
        assert_eq!(
            AppType::parse("robot").map(|t| t.as_str().to_owned()),
            Some("robot".into())
        );
        assert_eq!(AppType::parse("arm-2").map(|t| t.as_str().len()), Some(5));
        for bad in ["", "Robot", "a.b", "a/b", "-a", "a-", &"a".repeat(64)] {
            assert!(AppType::parse(bad).is_none(), "{bad}");
        }
        assert!(AppType::parse(&"a".repeat(63)).is_some());
    }
}
