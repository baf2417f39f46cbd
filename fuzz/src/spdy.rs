//! Target `spdy_frames`: the bytes a client (the API server, through cloudhub's tunnel)
//! sends on an upgraded exec, attach or port-forward connection → edgecore's SPDY/3.1 frame
//! codec (`verge_edgecore::streaming::spdy::SpdyCodec`): framing, the zlib-compressed header
//! blocks with SPDY's dictionary, header-block parsing.
//!
//! Input layout: the first byte picks where the rest is cut in two (the codec sees the
//! connection in two reads); the rest is the connection's bytes.
//!
//! Properties: nothing panics; a refusal ends the decoding (the session closes); every header
//! block decodes to at most 256 KiB of names and values (the codec's inflate bound, however
//! small the compressed frame); a data frame's payload is at most the frame limit, and the
//! frames together never carry more payload than the input.

use bytes::BytesMut;
use tokio_util::codec::Decoder as _;
use verge_edgecore::streaming::spdy::{Frame, Headers, SpdyCodec};

/// The frame payload limit of the fuzzed codec (the session's default is 16 MiB; a smaller
/// one reaches the refusal too).
const MAX_PAYLOAD: usize = 64 * 1024;

/// The decoded bound of one header block (`spdy::zlib::MAX_HEADER_BLOCK`).
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Decodes `data[1..]`, cut at `data[0]`, with a fresh codec; see the module docs.
pub fn check(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut codec = SpdyCodec::new(MAX_PAYLOAD);
    let mut buf = BytesMut::new();
    let at = usize::from(cut).min(rest.len());
    let mut payload = 0usize;
    for part in [&rest[..at], &rest[at..]] {
        buf.extend_from_slice(part);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => payload += checked(&frame),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    assert!(
        payload <= rest.len(),
        "{payload} payload bytes from {}",
        rest.len()
    );
}

/// Checks one frame's bounds; returns its data payload length.
fn checked(frame: &Frame) -> usize {
    match frame {
        Frame::Data { data, .. } => {
            assert!(
                data.len() <= MAX_PAYLOAD,
                "data frame of {} bytes",
                data.len()
            );
            data.len()
        }
        Frame::SynStream { headers, .. }
        | Frame::SynReply { headers, .. }
        | Frame::Headers { headers, .. } => {
            let size = block_size(headers);
            assert!(size <= MAX_HEADER_BLOCK, "header block of {size} bytes");
            0
        }
        _ => 0,
    }
}

/// The bytes of a header block's names and values.
fn block_size(headers: &Headers) -> usize {
    headers.0.iter().map(|(n, v)| n.len() + v.len()).sum()
}
