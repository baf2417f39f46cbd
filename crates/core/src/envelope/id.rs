//! [`MessageId`]: the identity of one message.

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// The longest message id accepted from a peer, in bytes: ids are kept per message in
/// flight and echoed in answers, so a peer's megabyte ids would multiply memory. A UUID has
/// 36; KubeEdge's are UUIDs too.
pub const MAX_MESSAGE_ID_BYTES: usize = 128;

/// The id of one message (`header.id` on the wire; `header.parent_id` of its answers).
///
/// Ids made here ([`MessageId::new`]) are random UUID v4 strings, as KubeEdge's beehive
/// `NewMessage` makes them. Ids read from the wire ([`MessageId::parse`]) are any non-empty
/// string: peers and tests may use their own scheme, only uniqueness matters (cloudhub and
/// the edge outbox match answers to messages by id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(String);

impl MessageId {
    /// A fresh random id (UUID v4, hyphenated lower-case, 36 characters).
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// A fresh short random id (8 hexadecimal digits), for messages whose id only pairs them
    /// with their answer on one stream: keepalives and their answers, the bulk of an idle
    /// node's traffic, where a UUID would be two thirds of the message.
    pub fn short() -> Self {
        // The low 32 bits of a v4 UUID are random.
        Self(format!("{:08x}", uuid::Uuid::new_v4().as_u128() as u32))
    }

    /// An id received from a peer: any non-empty string of at most [`MAX_MESSAGE_ID_BYTES`].
    ///
    /// # Errors
    /// [`Error::EmptyMessageId`] for `""`, [`Error::MessageIdTooLong`] beyond the bound.
    pub fn parse(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.is_empty() {
            return Err(Error::EmptyMessageId);
        }
        if id.len() > MAX_MESSAGE_ID_BYTES {
            return Err(Error::MessageIdTooLong {
                len: id.len(),
                max: MAX_MESSAGE_ID_BYTES,
            });
        }
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Same as [`MessageId::new`]: a fresh random id.
impl Default for MessageId {
    fn default() -> Self {
        Self::new()
    }
}

impl FromStr for MessageId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for MessageId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by [`MessageId`] be looked up with a `&str`.
impl Borrow<str> for MessageId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<MessageId> for String {
    fn from(id: MessageId) -> Self {
        id.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_ids_are_eight_hex_digits() {
        let id = super::MessageId::short();
        assert_eq!(id.as_str().len(), 8);
        assert!(id.as_str().chars().all(|c| c.is_ascii_hexdigit()));
    }
}
