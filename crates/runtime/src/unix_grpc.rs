//! gRPC servers on unix sockets that accept clients which send a socket path as
//! `:authority` (feature `unix-grpc`).
//!
//! KubeEdge mappers are Go programs that dial edgecore's DMI socket as a plain filesystem
//! path (`grpc.Dial("/etc/kubeedge/dmi.sock", …)` with a unix dialer). grpc-go then sends
//! the path as the HTTP/2 `:authority` of every request, percent-encoded
//! (`%2Fetc%2Fkubeedge%2Fdmi.sock`) in current releases and raw in older ones. Neither is a
//! valid URI authority, and the `h2` server under tonic resets such a stream with
//! `PROTOCOL_ERROR` (h2 issue 442), so no call of a KubeEdge mapper would ever arrive.
//!
//! [`incoming`] wraps a [`UnixListener`] for `tonic`'s `serve_with_incoming*`: each
//! accepted connection is relayed through an in-memory pipe, and in the client-to-server
//! direction every header block (HEADERS plus CONTINUATION frames) is decoded with HPACK,
//! an `:authority` that is not a valid URI authority is replaced by `localhost`, and the
//! block is encoded again (with the relay's own HPACK state, which the server's decoder
//! mirrors). Every other frame, and the whole server-to-client direction, passes through
//! unchanged. A connection that is not valid HTTP/2 is closed.
//!
//! The client's kernel-reported credentials ([`PeerCredentials`]: `SO_PEERCRED`'s pid, uid
//! and gid) travel with the relayed connection: tonic puts them into every request's
//! extensions, so a service can bind what a client does to the process that does it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tracing::debug;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types and flags this relay looks at (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Largest frame payload the relay sends: HTTP/2's default `SETTINGS_MAX_FRAME_SIZE`,
/// which every server accepts.
const MAX_FRAME: usize = 16_384;

/// Largest header block accepted from a client, in bytes.
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Largest HPACK dynamic table a client may ask for, in bytes: HTTP/2's default
/// `SETTINGS_HEADER_TABLE_SIZE`, the size tonic's server (h2) advertises and so the only one
/// a client may use (RFC 7541 §4.2). A larger table-size update fails the connection.
const MAX_TABLE_SIZE: usize = 4096;

/// Largest decoded header list of one block, counted as HTTP/2 counts
/// `SETTINGS_MAX_HEADER_LIST_SIZE` (name, value and 32 bytes per field; RFC 9113 §6.5.2).
/// HPACK lets a few bytes name a table entry of up to [`MAX_TABLE_SIZE`] bytes, so a
/// block of 256 KiB could otherwise decode to gigabytes; a DMI request's headers are a few
/// hundred bytes.
const MAX_HEADER_LIST: usize = 64 * 1024;

/// Buffer of the in-memory pipe between the relay and the server, in bytes.
const PIPE_BUFFER: usize = 64 * 1024;

/// What replaces an invalid `:authority`.
const LOCALHOST: &[u8] = b"localhost";

/// The connections accepted on `listener`, each relayed as described in the module
/// documentation; hand it to `tonic::transport::Server::serve_with_incoming(_shutdown)`.
/// Accept errors, and a client whose credentials the kernel does not report, are yielded
/// as errors (tonic logs them and goes on).
pub fn incoming(listener: UnixListener) -> Incoming {
    Incoming { listener }
}

/// The stream returned by [`incoming`].
#[derive(Debug)]
pub struct Incoming {
    listener: UnixListener,
}

impl Stream for Incoming {
    type Item = io::Result<Relayed>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.listener.poll_accept(cx) {
            Poll::Ready(Ok((stream, _))) => {
                Poll::Ready(Some(PeerCredentials::of(&stream).map(|peer| Relayed {
                    pipe: relay(stream),
                    peer,
                })))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The credentials of a unix-socket client as the kernel reports them when it connects
/// (`SO_PEERCRED`): they cannot be forged by the client. tonic adds them to the extensions
/// of every request on the connection (`request.extensions().get::<PeerCredentials>()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// The client's process id (in this process's pid namespace), if the kernel knows it.
    pub pid: Option<i32>,
    /// The client's effective user id.
    pub uid: u32,
    /// The client's effective group id.
    pub gid: u32,
}

impl PeerCredentials {
    /// The credentials of `stream`'s peer.
    ///
    /// # Errors
    /// The kernel does not report them.
    pub fn of(stream: &UnixStream) -> io::Result<Self> {
        let cred = stream.peer_cred()?;
        Ok(Self {
            pid: cred.pid(),
            uid: cred.uid(),
            gid: cred.gid(),
        })
    }
}

/// One relayed connection: the server's end of the pipe, with the client's credentials.
#[derive(Debug)]
pub struct Relayed {
    pipe: DuplexStream,
    peer: PeerCredentials,
}

impl AsyncRead for Relayed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_read(cx, buf)
    }
}

impl AsyncWrite for Relayed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.pipe).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Relayed {
    type ConnectInfo = PeerCredentials;

    fn connect_info(&self) -> PeerCredentials {
        self.peer
    }
}

/// Starts relaying `client` and returns the server's end of the pipe.
fn relay(client: UnixStream) -> DuplexStream {
    let (server_end, relay_end) = tokio::io::duplex(PIPE_BUFFER);
    crate::tasks::spawn("unix gRPC relay", async move {
        let (mut client_rx, mut client_tx) = client.into_split();
        let (mut pipe_rx, mut pipe_tx) = tokio::io::split(relay_end);
        let upstream = async {
            let result = pump_requests(&mut client_rx, &mut pipe_tx).await;
            let _ = pipe_tx.shutdown().await;
            result
        };
        let downstream = async {
            let result = tokio::io::copy(&mut pipe_rx, &mut client_tx).await;
            let _ = client_tx.shutdown().await;
            result.map(|_| ())
        };
        let (up, down) = tokio::join!(upstream, downstream);
        if let Err(error) = up.and(down) {
            debug!(%error, "unix gRPC connection closed");
        }
    });
    server_end
}

/// Copies the client's bytes to the server, rewriting header blocks ([`Rewriter`]).
async fn pump_requests<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut rewriter = Rewriter::default();
    let mut buf = vec![0u8; PIPE_BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let out = rewriter.feed(&buf[..n])?;
        if !out.is_empty() {
            to.write_all(&out).await?;
        }
    }
}

/// The client-to-server half of the relay as a byte transformer: [`Rewriter::feed`] takes
/// what the client sent and returns what to forward.
pub struct Rewriter {
    /// Bytes received and not yet forwarded (an incomplete preface or frame).
    pending: Vec<u8>,
    /// Whether the connection preface has been passed on.
    preface_done: bool,
    /// The header block being collected: the HEADERS frame's flags, its priority fields,
    /// its stream id and the fragments so far.
    block: Option<HeaderBlock>,
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

struct HeaderBlock {
    flags: u8,
    priority: Option<[u8; 5]>,
    stream: [u8; 4],
    fragment: Vec<u8>,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(MAX_TABLE_SIZE);
        Self {
            pending: Vec::new(),
            preface_done: false,
            block: None,
            decoder,
            encoder: Encoder::new(),
        }
    }
}

impl Rewriter {
    /// Consumes `input` and returns the bytes to forward (possibly none, while a frame is
    /// incomplete).
    ///
    /// # Errors
    /// `InvalidData` when the client does not speak HTTP/2 (bad preface, a header block that
    /// does not decode, a CONTINUATION out of place), or exceeds the relay's bounds: a header
    /// block over 256 KiB, an HPACK table-size update over 4 KiB, a block decoding to more
    /// than 64 KiB of headers.
    pub fn feed(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        self.pending.extend_from_slice(input);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut at = 0;
        if !self.preface_done {
            let have = self.pending.len().min(PREFACE.len());
            if self.pending[..have] != PREFACE[..have] {
                return Err(invalid("not an HTTP/2 connection preface"));
            }
            if have < PREFACE.len() {
                return Ok(out);
            }
            out.extend_from_slice(PREFACE);
            at = PREFACE.len();
            self.preface_done = true;
        }
        while self.pending.len() - at >= 9 {
            let header = &self.pending[at..at + 9];
            let len = (usize::from(header[0]) << 16)
                | (usize::from(header[1]) << 8)
                | usize::from(header[2]);
            if self.pending.len() - at - 9 < len {
                break;
            }
            let (kind, flags) = (header[3], header[4]);
            let mut stream = [0u8; 4];
            stream.copy_from_slice(&header[5..9]);
            let payload = self.pending[at + 9..at + 9 + len].to_vec();
            let frame_end = at + 9 + len;
            match kind {
                HEADERS => self.start_block(flags, stream, &payload, &mut out)?,
                CONTINUATION => self.continue_block(flags, &payload, &mut out)?,
                _ if self.block.is_some() => {
                    return Err(invalid("a frame interrupted a header block"));
                }
                _ => out.extend_from_slice(&self.pending[at..frame_end]),
            }
            at = frame_end;
        }
        self.pending.drain(..at);
        Ok(out)
    }

    fn start_block(
        &mut self,
        flags: u8,
        stream: [u8; 4],
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if self.block.is_some() {
            return Err(invalid("HEADERS inside a header block"));
        }
        let mut body = payload;
        let mut padding = 0;
        if flags & PADDED != 0 {
            let (&pad, rest) = body
                .split_first()
                .ok_or_else(|| invalid("empty padded HEADERS"))?;
            padding = usize::from(pad);
            body = rest;
        }
        let priority = if flags & PRIORITY != 0 {
            let (fields, rest) = body
                .split_first_chunk::<5>()
                .ok_or_else(|| invalid("short HEADERS priority"))?;
            body = rest;
            Some(*fields)
        } else {
            None
        };
        let fragment = body
            .get(
                ..body
                    .len()
                    .checked_sub(padding)
                    .ok_or_else(|| invalid("HEADERS padding too long"))?,
            )
            .unwrap_or_default()
            .to_vec();
        if fragment.len() > MAX_HEADER_BLOCK {
            return Err(invalid("header block too large"));
        }
        self.block = Some(HeaderBlock {
            flags,
            priority,
            stream,
            fragment,
        });
        if flags & END_HEADERS != 0 {
            self.finish_block(out)?;
        }
        Ok(())
    }

    fn continue_block(&mut self, flags: u8, payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let block = self
            .block
            .as_mut()
            .ok_or_else(|| invalid("CONTINUATION without HEADERS"))?;
        if block.fragment.len() + payload.len() > MAX_HEADER_BLOCK {
            return Err(invalid("header block too large"));
        }
        block.fragment.extend_from_slice(payload);
        if flags & END_HEADERS != 0 {
            self.finish_block(out)?;
        }
        Ok(())
    }

    /// Decodes the collected block, fixes `:authority`, encodes it again and writes it as a
    /// HEADERS frame (plus CONTINUATION frames when it exceeds [`MAX_FRAME`]).
    fn finish_block(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(block) = self.block.take() else {
            return Ok(());
        };
        let mut headers = Vec::new();
        let mut list_size = 0usize;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                // Counted for every field, kept only while within the bound: an indexed
                // field costs the decoder no allocation, a kept one costs a copy.
                list_size = list_size.saturating_add(name.len() + value.len() + 32);
                if list_size <= MAX_HEADER_LIST {
                    headers.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| invalid(&format!("header block does not decode: {e:?}")))?;
        if list_size > MAX_HEADER_LIST {
            return Err(invalid("header list too large"));
        }
        for (name, value) in &mut headers {
            if name.as_slice() == b":authority" && !valid_authority(value) {
                debug!(authority = %String::from_utf8_lossy(value), "rewrote :authority");
                *value = LOCALHOST.to_vec();
            }
        }
        let mut encoded = Vec::new();
        if let Some(priority) = block.priority {
            encoded.extend_from_slice(&priority);
        }
        self.encoder
            .encode_into(
                headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                &mut encoded,
            )
            .map_err(|e| invalid(&format!("header block does not encode: {e}")))?;
        let keep = block.flags & (END_STREAM | PRIORITY);
        let mut chunks = encoded.chunks(MAX_FRAME).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let (kind, mut flags) = if first {
                (HEADERS, keep)
            } else {
                (CONTINUATION, 0)
            };
            if last {
                flags |= END_HEADERS;
            }
            write_frame(out, kind, flags, block.stream, chunk);
            first = false;
        }
        if encoded.is_empty() {
            write_frame(out, HEADERS, keep | END_HEADERS, block.stream, &[]);
        }
        Ok(())
    }
}

fn write_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: [u8; 4], payload: &[u8]) {
    let len = payload.len();
    // `len` <= MAX_FRAME (2^14) fits the 24-bit length field.
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream);
    out.extend_from_slice(payload);
}

/// Whether `value` parses as a URI authority (what h2 requires).
fn valid_authority(value: &[u8]) -> bool {
    std::str::from_utf8(value).is_ok_and(|s| s.parse::<http::uri::Authority>().is_ok())
}

fn invalid(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, kind, flags, stream.to_be_bytes(), payload);
        out
    }

    fn request(encoder: &mut Encoder<'_>, authority: &[u8]) -> Vec<u8> {
        encoder.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/v1beta1.DeviceManagerService/MapperRegister"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
        ])
    }

    fn decode_headers(decoder: &mut Decoder<'_>, bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        assert_eq!(bytes[3], HEADERS);
        let len = (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        decoder.decode(&bytes[9..9 + len]).expect("decodes")
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_rest_passes() {
        let mut client = Encoder::new();
        let mut server = Decoder::new();
        let mut rewriter = Rewriter::default();
        let settings = frame(0x4, 0, 0, &[]);
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&settings);
        let out = rewriter.feed(&input).expect("preface");
        assert_eq!(out, input);
        for authority in [
            &b"%2Fetc%2Fkubeedge%2Fdmi.sock"[..],
            b"/etc/kubeedge/dmi.sock",
            b"localhost",
        ] {
            let block = request(&mut client, authority);
            let bytes = frame(HEADERS, END_HEADERS, 1, &block);
            // Fed in two pieces: the relay waits for the whole frame.
            let (a, b) = bytes.split_at(7);
            assert!(rewriter.feed(a).expect("part").is_empty());
            let out = rewriter.feed(b).expect("rest");
            let headers = decode_headers(&mut server, &out);
            let got: Vec<_> = headers
                .iter()
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .collect();
            assert!(
                got.contains(&(&b":authority"[..], &b"localhost"[..])),
                "{got:?}"
            );
            assert!(got.contains(&(
                &b":path"[..],
                &b"/v1beta1.DeviceManagerService/MapperRegister"[..]
            )));
        }
        let data = frame(0x0, END_STREAM, 1, b"payload");
        assert_eq!(rewriter.feed(&data).expect("data"), data);
    }

    #[test]
    fn continuation_and_padding_are_reassembled() {
        let mut client = Encoder::new();
        let mut server = Decoder::new();
        let mut rewriter = Rewriter::default();
        rewriter.feed(PREFACE).expect("preface");
        let block = request(&mut client, b"%2Ftmp%2Fx.sock");
        let (first, second) = block.split_at(10);
        let mut padded = vec![3u8];
        padded.extend_from_slice(first);
        padded.extend_from_slice(&[0, 0, 0]);
        let mut input = frame(HEADERS, PADDED | END_STREAM, 3, &padded);
        input.extend(frame(CONTINUATION, END_HEADERS, 3, second));
        let out = rewriter.feed(&input).expect("block");
        assert_eq!(out[4], END_STREAM | END_HEADERS);
        let headers = decode_headers(&mut server, &out);
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == b":authority" && v == b"localhost")
        );
    }

    /// An HPACK bomb: one literal as large as the table allows, added to the dynamic table,
    /// then a 16 KiB frame of one-byte references to it would decode to about 48 MiB (and a block
    /// of 256 KiB to a gigabyte) without the header-list bound.
    #[test]
    fn an_hpack_bomb_is_refused_without_decoding_it() {
        let mut rewriter = Rewriter::default();
        rewriter.feed(PREFACE).expect("preface");
        let mut block = vec![0x40, 0x01, b'x']; // literal, incremental indexing, name "x"
        let value = vec![b'a'; 4000];
        block.push(0x7f); // value length 4000: 127 + 3873 in 7-bit prefix continuation
        let mut rest = 4000 - 127;
        while rest >= 128 {
            block.push(u8::try_from(rest % 128).expect("small") | 0x80);
            rest /= 128;
        }
        block.push(u8::try_from(rest).expect("small"));
        block.extend_from_slice(&value);
        block.extend(std::iter::repeat_n(0x80 | 62, MAX_FRAME - block.len())); // index 62
        let error = rewriter
            .feed(&frame(HEADERS, END_HEADERS, 1, &block))
            .expect_err("refused");
        assert!(
            error.to_string().contains("header list too large"),
            "{error}"
        );
    }

    #[test]
    fn a_table_size_update_beyond_the_servers_is_refused() {
        let mut rewriter = Rewriter::default();
        rewriter.feed(PREFACE).expect("preface");
        // Dynamic table size update to 1 MiB (5-bit prefix 31, then 2^20 - 31).
        let mut block = vec![0x3f];
        let mut rest = (1usize << 20) - 31;
        while rest >= 128 {
            block.push(u8::try_from(rest % 128).expect("small") | 0x80);
            rest /= 128;
        }
        block.push(u8::try_from(rest).expect("small"));
        block.extend_from_slice(&[0x82]); // :method GET, so the block does not end in an update
        let error = rewriter
            .feed(&frame(HEADERS, END_HEADERS, 1, &block))
            .expect_err("refused");
        assert!(error.to_string().contains("does not decode"), "{error}");
    }

    #[test]
    fn garbage_is_refused() {
        let mut rewriter = Rewriter::default();
        assert!(rewriter.feed(b"GET / HTTP/1.1\r\n").is_err());
        let mut rewriter = Rewriter::default();
        rewriter.feed(PREFACE).expect("preface");
        assert!(
            rewriter
                .feed(&frame(CONTINUATION, END_HEADERS, 1, b"x"))
                .is_err()
        );
    }
}
