//! A `tokio-util` codec for SPDY/3.1 frames: [`SpdyCodec`] decodes what the client sends and
//! encodes what this server sends, each instance owning one direction's zlib stream.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::Error;
use super::frame::{
    FLAG_FIN, FRAME_HEADER_LEN, Frame, Headers, RstStatus, kind, put_control_header,
    put_data_header,
};
use super::zlib::{HeaderDeflater, HeaderInflater};

/// The largest payload a frame can announce (u24).
pub const MAX_FRAME_PAYLOAD: usize = 0x00ff_ffff;

/// Frame codec; use one instance per direction (each holds that direction's zlib state).
#[derive(Debug)]
pub struct SpdyCodec {
    max_payload: usize,
    inflater: HeaderInflater,
    deflater: HeaderDeflater,
}

impl SpdyCodec {
    /// A codec refusing frames whose payload exceeds `max_payload` bytes (at most
    /// [`MAX_FRAME_PAYLOAD`], which a u24 length cannot exceed anyway).
    pub fn new(max_payload: usize) -> Self {
        Self {
            max_payload: max_payload.min(MAX_FRAME_PAYLOAD),
            inflater: HeaderInflater::default(),
            deflater: HeaderDeflater::default(),
        }
    }
}

impl Default for SpdyCodec {
    fn default() -> Self {
        Self::new(MAX_FRAME_PAYLOAD)
    }
}

impl Decoder for SpdyCodec {
    type Item = Frame;
    type Error = Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Error> {
        if src.len() < FRAME_HEADER_LEN {
            src.reserve(FRAME_HEADER_LEN);
            return Ok(None);
        }
        let len = usize::from(src[5]) << 16 | usize::from(src[6]) << 8 | usize::from(src[7]);
        if len > self.max_payload {
            return Err(Error::FrameTooLarge {
                len,
                max: self.max_payload,
            });
        }
        if src.len() < FRAME_HEADER_LEN + len {
            src.reserve(FRAME_HEADER_LEN + len - src.len());
            return Ok(None);
        }
        let mut header = src.split_to(FRAME_HEADER_LEN);
        let mut payload = src.split_to(len);
        let first = header.get_u32();
        let flags = header.get_u8();
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first,
                fin: flags & FLAG_FIN != 0,
                data: payload.freeze(),
            }));
        }
        let version = u16::try_from((first >> 16) & 0x7fff).unwrap_or(u16::MAX);
        if version != 3 {
            return Err(Error::UnsupportedVersion { version });
        }
        let frame_kind = u16::try_from(first & 0xffff).unwrap_or(u16::MAX);
        let malformed = || Error::MalformedFrame {
            kind: frame_kind,
            len,
        };
        let need = |n: usize| if len < n { Err(malformed()) } else { Ok(()) };
        let exact = |n: usize| if len != n { Err(malformed()) } else { Ok(()) };
        let fin = flags & FLAG_FIN != 0;
        let frame = match frame_kind {
            kind::SYN_STREAM => {
                need(10)?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let associated_id = payload.get_u32() & 0x7fff_ffff;
                let priority = payload.get_u8() >> 5;
                payload.advance(1);
                let headers = Headers::decode(&self.inflater.inflate(&payload)?)?;
                Frame::SynStream {
                    stream_id,
                    associated_id,
                    priority,
                    flags,
                    headers,
                }
            }
            kind::SYN_REPLY | kind::HEADERS => {
                need(4)?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let headers = Headers::decode(&self.inflater.inflate(&payload)?)?;
                if frame_kind == kind::SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        fin,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        fin,
                        headers,
                    }
                }
            }
            kind::RST_STREAM => {
                exact(8)?;
                Frame::RstStream {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    status: RstStatus::from_code(payload.get_u32()),
                }
            }
            kind::SETTINGS => Frame::Settings,
            kind::PING => {
                exact(4)?;
                Frame::Ping {
                    id: payload.get_u32(),
                }
            }
            kind::GOAWAY => {
                need(4)?;
                let last_good_stream_id = payload.get_u32() & 0x7fff_ffff;
                let status = if payload.remaining() >= 4 {
                    payload.get_u32()
                } else {
                    0
                };
                Frame::GoAway {
                    last_good_stream_id,
                    status,
                }
            }
            kind::WINDOW_UPDATE => {
                exact(8)?;
                Frame::WindowUpdate {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    delta: payload.get_u32() & 0x7fff_ffff,
                }
            }
            other => Frame::Unknown { kind: other },
        };
        Ok(Some(frame))
    }
}

impl Encoder<Frame> for SpdyCodec {
    type Error = Error;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), Error> {
        match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if data.len() > MAX_FRAME_PAYLOAD {
                    return Err(Error::FrameTooLarge {
                        len: data.len(),
                        max: MAX_FRAME_PAYLOAD,
                    });
                }
                dst.reserve(FRAME_HEADER_LEN + data.len());
                put_data_header(dst, stream_id, fin, data.len());
                dst.put_slice(&data);
            }
            Frame::SynStream {
                stream_id,
                associated_id,
                priority,
                flags,
                headers,
            } => {
                let block = self.compress(&headers)?;
                put_control_header(dst, kind::SYN_STREAM, flags, 10 + block.len());
                dst.put_u32(stream_id);
                dst.put_u32(associated_id);
                dst.put_u8(priority << 5);
                dst.put_u8(0);
                dst.put_slice(&block);
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            } => self.put_stream_headers(dst, kind::SYN_REPLY, stream_id, fin, &headers)?,
            Frame::Headers {
                stream_id,
                fin,
                headers,
            } => self.put_stream_headers(dst, kind::HEADERS, stream_id, fin, &headers)?,
            Frame::RstStream { stream_id, status } => {
                put_control_header(dst, kind::RST_STREAM, 0, 8);
                dst.put_u32(stream_id);
                dst.put_u32(status.code());
            }
            Frame::Ping { id } => {
                put_control_header(dst, kind::PING, 0, 4);
                dst.put_u32(id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                put_control_header(dst, kind::GOAWAY, 0, 8);
                dst.put_u32(last_good_stream_id);
                dst.put_u32(status);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                put_control_header(dst, kind::WINDOW_UPDATE, 0, 8);
                dst.put_u32(stream_id);
                dst.put_u32(delta);
            }
            Frame::Settings => {
                put_control_header(dst, kind::SETTINGS, 0, 4);
                dst.put_u32(0);
            }
            Frame::Unknown { kind } => return Err(Error::Unencodable { kind }),
        }
        Ok(())
    }
}

impl SpdyCodec {
    /// Compresses a header block on this direction's zlib stream.
    fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, Error> {
        let mut raw = Vec::new();
        headers.encode(&mut raw);
        self.deflater.deflate(&raw)
    }

    /// Writes a SYN_REPLY or HEADERS frame (stream id + compressed block).
    fn put_stream_headers(
        &mut self,
        dst: &mut BytesMut,
        frame_kind: u16,
        stream_id: u32,
        fin: bool,
        headers: &Headers,
    ) -> Result<(), Error> {
        let block = self.compress(headers)?;
        put_control_header(
            dst,
            frame_kind,
            if fin { FLAG_FIN } else { 0 },
            4 + block.len(),
        );
        dst.put_u32(stream_id);
        dst.put_slice(&block);
        Ok(())
    }
}
