//! Target `dmi_relay`: the bytes a mapper sends on edgecore's DMI socket → the relay that
//! rewrites each HTTP/2 header block's `:authority` before tonic sees it
//! (`verge_runtime::unix_grpc::Rewriter`): HTTP/2 framing, padding, CONTINUATION
//! reassembly, HPACK decoding and encoding.
//!
//! Input layout: the first byte picks where the rest is cut in two (the relay sees the
//! connection in two reads); the rest is what follows the HTTP/2 connection preface.
//!
//! Properties: nothing panics and memory stays bounded (an HPACK bomb, a table-size update
//! beyond the server's, a header block over 256 KiB are refused, not decoded); a refusal is
//! `InvalidData`; frames other than header blocks pass through unchanged, so what the relay
//! forwards is never more than the input plus its re-encoded header blocks (each at most
//! the relay's 64 KiB header-list bound, in 16 KiB frames).

use std::io::ErrorKind;

use verge_runtime::unix_grpc::Rewriter;

/// The HTTP/2 client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Feeds the preface, then `data[1..]` in two reads cut at `data[0]`, to a fresh relay.
pub fn check(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut rewriter = Rewriter::default();
    let preface = rewriter.feed(PREFACE).expect("the preface passes");
    assert_eq!(preface, PREFACE);
    let at = usize::from(cut).min(rest.len());
    let mut forwarded = 0usize;
    for part in [&rest[..at], &rest[at..]] {
        match rewriter.feed(part) {
            Ok(out) => forwarded += out.len(),
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
                return;
            }
        }
    }
    // Each header block (at least a 9-byte frame header in) comes out as at most 64 KiB of
    // headers plus 5 priority bytes, in frames of at most 16 KiB with 9-byte headers.
    let blocks = rest.len() / 9 + 1;
    let per_block = 64 * 1024 + 5 + 9 * (64 * 1024 / 16_384 + 2);
    assert!(
        forwarded <= rest.len() + blocks * per_block,
        "forwarded {forwarded} bytes for {} in",
        rest.len()
    );
}
