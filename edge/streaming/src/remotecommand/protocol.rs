//! The `channel.k8s.io` protocol versions served over SPDY.

/// A negotiated remotecommand protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    /// `v2.channel.k8s.io`: typed streams, plain-text errors.
    V2,
    /// `v3.channel.k8s.io`: v2 plus the resize stream.
    V3,
    /// `v4.channel.k8s.io` (and `v5`, handled alike over SPDY): JSON status with exit codes.
    V4,
}

/// What this server offers, in its order of preference (the client's order decides).
pub const SUPPORTED: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
];

impl Protocol {
    /// The version of a negotiated name (one of [`SUPPORTED`]).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "v5.channel.k8s.io" | "v4.channel.k8s.io" => Some(Self::V4),
            "v3.channel.k8s.io" => Some(Self::V3),
            "v2.channel.k8s.io" => Some(Self::V2),
            _ => None,
        }
    }

    /// Whether a TTY session has a resize stream.
    pub fn resizes(self) -> bool {
        self >= Self::V3
    }
}
