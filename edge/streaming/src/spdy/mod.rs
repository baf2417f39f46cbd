//! SPDY/3.1, server side, as Kubernetes clients speak it to a kubelet (client-go's
//! `transport/spdy` on moby/spdystream): the subset exec, attach and port-forward use.
//!
//! Implemented: DATA, SYN_STREAM, SYN_REPLY, RST_STREAM, PING (echoed), GOAWAY, HEADERS
//! (decoded, ignored); SETTINGS and WINDOW_UPDATE are decoded and ignored, since neither
//! peer does flow control. Header blocks use one zlib stream per direction with the SPDY/3
//! dictionary. The server never opens streams or sends pings.
//!
//! # Layout
//! - [`frame`]: frame types and header blocks.
//! - [`codec`]: the `tokio-util` codec ([`SpdyCodec`]).
//! - `zlib`: header-block compression; [`dictionary`]: the SPDY/3 dictionary.
//! - [`session`]: a connection's session ([`Session`]) and its writer task; `reader`: its
//!   reader task.
//! - `idle`: the idle timeout.
//! - [`stream`]: accepted streams as `AsyncRead`/`AsyncWrite` halves.

pub mod codec;
pub mod dictionary;
pub mod frame;
mod idle;
mod reader;
pub mod session;
pub mod stream;
mod zlib;

#[cfg(test)]
mod tests;

pub use codec::SpdyCodec;
pub use frame::{Frame, Headers, RstStatus};
pub use idle::DEFAULT_IDLE_TIMEOUT;
pub use session::{Session, SessionConfig, SessionHandle};
pub use stream::{IncomingStream, Stream, StreamReader, StreamWriter};

/// Errors of the SPDY layer; each ends the session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the connection failed.
    #[error("SPDY connection I/O failed")]
    Io(#[from] std::io::Error),
    /// A frame announced a payload larger than the session accepts.
    #[error("SPDY frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// Announced payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A control frame of a version other than 3.
    #[error("unsupported SPDY version {version} (only SPDY/3.1 is served)")]
    UnsupportedVersion {
        /// The frame's version.
        version: u16,
    },
    /// A control frame whose length does not fit its type.
    #[error("malformed SPDY control frame of type {kind} with {len} payload bytes")]
    MalformedFrame {
        /// Frame type.
        kind: u16,
        /// Payload length.
        len: usize,
    },
    /// An uncompressed header block that does not parse.
    #[error("malformed SPDY header block: bad {what}")]
    HeaderBlock {
        /// Which part is bad.
        what: &'static str,
    },
    /// An uncompressed header block past the limit.
    #[error("SPDY header block larger than {max} bytes")]
    HeaderBlockTooLarge {
        /// The limit.
        max: usize,
    },
    /// The header block's zlib data is corrupt.
    #[error("SPDY header block does not inflate")]
    Inflate(#[source] flate2::DecompressError),
    /// The header block's zlib stream wants a dictionary other than SPDY/3's.
    #[error("SPDY header block needs an unknown zlib dictionary (Adler-32 {adler32:#010x})")]
    UnknownDictionary {
        /// The Adler-32 the stream names.
        adler32: u32,
    },
    /// Compressing an outgoing header block failed.
    #[error("SPDY header block does not deflate")]
    Deflate(#[source] flate2::CompressError),
    /// An attempt to send a frame type this server does not write.
    #[error("cannot encode SPDY control frame of type {kind}")]
    Unencodable {
        /// Frame type.
        kind: u16,
    },
}
