//! SPDY/3.1 frames (SPDY draft 3.1 §2.2–2.6) and their uncompressed header blocks.
//!
//! Every frame has an 8-byte header. A control frame starts with the C bit and version 3
//! (`0x80 0x03`), then a u16 type, a flags byte and a u24 payload length; a data frame
//! starts with a 31-bit stream id, then flags (`0x01` FIN) and a u24 length. All integers
//! are big-endian.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::Error;

/// FIN flag of a DATA, SYN_STREAM, SYN_REPLY or HEADERS frame: the sender's half is closed.
pub const FLAG_FIN: u8 = 0x01;
/// UNIDIRECTIONAL flag of a SYN_STREAM: the receiver's half starts closed.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// Control frame types (SPDY/3 §2.6).
pub(crate) mod kind {
    pub const SYN_STREAM: u16 = 1;
    pub const SYN_REPLY: u16 = 2;
    pub const RST_STREAM: u16 = 3;
    pub const SETTINGS: u16 = 4;
    pub const PING: u16 = 6;
    pub const GOAWAY: u16 = 7;
    pub const HEADERS: u16 = 8;
    pub const WINDOW_UPDATE: u16 = 9;
}

/// RST_STREAM status codes (SPDY/3 §2.4.2) this server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RstStatus {
    /// 1: the peer broke the protocol (e.g. a SYN_STREAM id out of order).
    ProtocolError,
    /// 2: a frame for a stream that is not open.
    InvalidStream,
    /// 3: the stream was refused before any processing (e.g. a bad port-forward header).
    RefusedStream,
    /// 5: the stream is no longer needed (what moby/spdystream's `Reset` sends).
    Cancel,
    /// 6: a failure in this server.
    InternalError,
    /// Any other code received from the peer.
    Other(u32),
}

impl RstStatus {
    /// The wire code.
    pub fn code(self) -> u32 {
        match self {
            Self::ProtocolError => 1,
            Self::InvalidStream => 2,
            Self::RefusedStream => 3,
            Self::Cancel => 5,
            Self::InternalError => 6,
            Self::Other(code) => code,
        }
    }

    /// The status of a wire code.
    pub fn from_code(code: u32) -> Self {
        match code {
            1 => Self::ProtocolError,
            2 => Self::InvalidStream,
            3 => Self::RefusedStream,
            5 => Self::Cancel,
            6 => Self::InternalError,
            other => Self::Other(other),
        }
    }
}

/// A header block: name/value pairs in wire order. Names are lowercase on the wire (SPDY/3
/// §2.6.10); several values of one name are joined with NUL bytes, kept as they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The value of `name`, matched case-insensitively (Kubernetes sends `streamType` as
    /// `streamtype`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Encodes the uncompressed block: u32 pair count, then per pair u32 length + name and u32
    /// length + value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(u32::try_from(self.0.len()).unwrap_or(u32::MAX));
        for (name, value) in &self.0 {
            for part in [name.as_bytes(), value.as_bytes()] {
                out.put_u32(u32::try_from(part.len()).unwrap_or(u32::MAX));
                out.put_slice(part);
            }
        }
    }

    /// Decodes an uncompressed block.
    ///
    /// # Errors
    /// [`Error::HeaderBlock`] if it is truncated, has trailing bytes or a name or value that
    /// is not UTF-8.
    pub fn decode(mut block: &[u8]) -> Result<Self, Error> {
        let bad = |what: &'static str| Error::HeaderBlock { what };
        if block.remaining() < 4 {
            return Err(bad("pair count"));
        }
        let count = block.get_u32();
        let mut pairs = Vec::new();
        for _ in 0..count {
            let mut pair = [String::new(), String::new()];
            for slot in &mut pair {
                if block.remaining() < 4 {
                    return Err(bad("length"));
                }
                let len = block.get_u32() as usize;
                if block.remaining() < len {
                    return Err(bad("name or value"));
                }
                *slot = std::str::from_utf8(&block[..len])
                    .map_err(|_| bad("UTF-8"))?
                    .to_owned();
                block.advance(len);
            }
            let [name, value] = pair;
            pairs.push((name, value));
        }
        if block.has_remaining() {
            return Err(bad("trailing bytes"));
        }
        Ok(Self(pairs))
    }
}

/// One SPDY/3.1 frame, with header blocks uncompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA: bytes of one stream; `fin` half-closes the sender's side.
    Data {
        /// The stream (31 bits).
        stream_id: u32,
        /// FIN flag.
        fin: bool,
        /// Payload.
        data: Bytes,
    },
    /// SYN_STREAM: the peer opens a stream.
    SynStream {
        /// The new stream's id (odd from a client).
        stream_id: u32,
        /// Associated stream id (0 from Kubernetes clients).
        associated_id: u32,
        /// Priority 0–7 (the top 3 bits of the byte on the wire).
        priority: u8,
        /// Flags: [`FLAG_FIN`], [`FLAG_UNIDIRECTIONAL`].
        flags: u8,
        /// The stream's headers.
        headers: Headers,
    },
    /// SYN_REPLY: accepts a stream the peer opened.
    SynReply {
        /// The accepted stream.
        stream_id: u32,
        /// FIN flag.
        fin: bool,
        /// Reply headers (empty from a kubelet).
        headers: Headers,
    },
    /// RST_STREAM: aborts a stream both ways.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why.
        status: RstStatus,
    },
    /// SETTINGS: decoded and ignored (moby/spdystream never sends them).
    Settings,
    /// PING: echoed unchanged when the id's parity is the peer's.
    Ping {
        /// The ping id (odd from a client).
        id: u32,
    },
    /// GOAWAY: the sender accepts no new streams after `last_good_stream_id`.
    GoAway {
        /// The last stream the sender accepted.
        last_good_stream_id: u32,
        /// 0 OK, 1 PROTOCOL_ERROR, 2 INTERNAL_ERROR.
        status: u32,
    },
    /// HEADERS: more headers of a stream (decoded since it advances the zlib stream).
    Headers {
        /// The stream.
        stream_id: u32,
        /// FIN flag.
        fin: bool,
        /// The headers.
        headers: Headers,
    },
    /// WINDOW_UPDATE: decoded and ignored (Kubernetes peers do no flow control).
    WindowUpdate {
        /// The stream.
        stream_id: u32,
        /// Window increment.
        delta: u32,
    },
    /// A control frame of a type SPDY/3.1 does not define; ignored (SPDY/3 §2.2.1).
    Unknown {
        /// The frame type.
        kind: u16,
    },
}

/// Length of every frame header.
pub const FRAME_HEADER_LEN: usize = 8;

/// Writes a control frame header.
pub(crate) fn put_control_header(dst: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    dst.put_u16(0x8003);
    dst.put_u16(kind);
    dst.put_u8(flags);
    put_u24(dst, len);
}

/// Writes a data frame header.
pub(crate) fn put_data_header(dst: &mut BytesMut, stream_id: u32, fin: bool, len: usize) {
    dst.put_u32(stream_id & 0x7fff_ffff);
    dst.put_u8(if fin { FLAG_FIN } else { 0 });
    put_u24(dst, len);
}

fn put_u24(dst: &mut BytesMut, len: usize) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).min(0x00ff_ffff);
    dst.put_slice(&len.to_be_bytes()[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_block_round_trip() {
        let headers = Headers(vec![
            ("streamtype".into(), "data".into()),
            ("port".into(), "8080".into()),
            ("x-multi".into(), "a\0b".into()),
        ]);
        let mut raw = Vec::new();
        headers.encode(&mut raw);
        assert_eq!(Headers::decode(&raw).ok(), Some(headers.clone()));
        assert_eq!(headers.get("streamType"), Some("data"));
        assert_eq!(headers.get("requestID"), None);
    }

    #[test]
    fn truncated_header_block_is_an_error() {
        let mut raw = Vec::new();
        Headers(vec![("port".into(), "80".into())]).encode(&mut raw);
        for cut in 0..raw.len() {
            assert!(Headers::decode(&raw[..cut]).is_err(), "cut at {cut}");
        }
        raw.push(0);
        assert!(Headers::decode(&raw).is_err());
    }

    #[test]
    fn rst_codes_round_trip() {
        for status in [
            RstStatus::ProtocolError,
            RstStatus::InvalidStream,
            RstStatus::RefusedStream,
            RstStatus::Cancel,
            RstStatus::InternalError,
            RstStatus::Other(11),
        ] {
            assert_eq!(RstStatus::from_code(status.code()), status);
        }
    }
}
