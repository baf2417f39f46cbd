//! Header-block compression: one zlib stream per direction for the whole session, primed
//! with the SPDY/3 dictionary and sync-flushed after every block (SPDY/3 §2.6.10.1), as Go's
//! `compress/zlib` in moby/spdystream does.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::Error;
use super::dictionary::{SPDY3_DICTIONARY, SPDY3_DICTIONARY_ADLER32};

/// Largest uncompressed header block accepted (a Kubernetes block holds three short pairs).
pub const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// The receiving direction: inflates each frame's compressed block.
pub struct HeaderInflater {
    inflate: Decompress,
}

impl std::fmt::Debug for HeaderInflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderInflater")
            .field("total_in", &self.inflate.total_in())
            .finish()
    }
}

impl Default for HeaderInflater {
    fn default() -> Self {
        Self {
            inflate: Decompress::new(true),
        }
    }
}

impl HeaderInflater {
    /// Inflates one frame's compressed header block, which must be consumed exactly.
    ///
    /// # Errors
    /// [`Error::Inflate`] for corrupt data or a dictionary other than SPDY/3's;
    /// [`Error::HeaderBlockTooLarge`] past [`MAX_HEADER_BLOCK`].
    pub fn inflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(input.len().saturating_mul(4).clamp(64, 4096));
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(Error::HeaderBlockTooLarge {
                        max: MAX_HEADER_BLOCK,
                    });
                }
                out.reserve(out.len().max(256));
            }
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let result = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.inflate.total_in() - before_in).unwrap_or(0);
            input = &input[consumed.min(input.len())..];
            match result {
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) => {
                    let progressed = consumed > 0 || self.inflate.total_out() > before_out;
                    if input.is_empty() && out.len() < out.capacity() {
                        return Ok(out);
                    }
                    if !progressed && out.len() < out.capacity() {
                        return Err(Error::HeaderBlock {
                            what: "compressed bytes (truncated)",
                        });
                    }
                }
                Err(error) => match error.needs_dictionary() {
                    Some(SPDY3_DICTIONARY_ADLER32) => {
                        self.inflate
                            .set_dictionary(SPDY3_DICTIONARY)
                            .map_err(Error::Inflate)?;
                    }
                    Some(other) => {
                        return Err(Error::UnknownDictionary { adler32: other });
                    }
                    None => {
                        return Err(Error::Inflate(error));
                    }
                },
            }
        }
    }
}

/// The sending direction: deflates each outgoing header block with a sync flush.
pub struct HeaderDeflater {
    deflate: Compress,
    primed: bool,
}

impl std::fmt::Debug for HeaderDeflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderDeflater")
            .field("total_out", &self.deflate.total_out())
            .finish()
    }
}

impl Default for HeaderDeflater {
    fn default() -> Self {
        Self {
            deflate: Compress::new(Compression::best(), true),
            primed: false,
        }
    }
}

impl HeaderDeflater {
    /// Deflates one uncompressed header block, ending with a sync flush so the frame holds
    /// whole decodable bytes.
    ///
    /// # Errors
    /// [`Error::Deflate`] if zlib fails.
    pub fn deflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, Error> {
        if !self.primed {
            self.deflate
                .set_dictionary(SPDY3_DICTIONARY)
                .map_err(Error::Deflate)?;
            self.primed = true;
        }
        let mut out = Vec::with_capacity(input.len() + 64);
        loop {
            if out.len() == out.capacity() {
                out.reserve(256);
            }
            let before_in = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(Error::Deflate)?;
            let consumed = usize::try_from(self.deflate.total_in() - before_in).unwrap_or(0);
            input = &input[consumed.min(input.len())..];
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_the_spdy3_one() {
        assert_eq!(SPDY3_DICTIONARY.len(), 1423);
        assert!(SPDY3_DICTIONARY.starts_with(b"\x00\x00\x00\x07options\x00\x00\x00\x04head"));
        assert!(SPDY3_DICTIONARY.ends_with(b"utf-,*,enq=0."));
        // Adler-32 computed here, compared with the constant the Go fixture's header carries.
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in SPDY3_DICTIONARY {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, SPDY3_DICTIONARY_ADLER32);
    }

    #[test]
    fn blocks_round_trip_on_one_stream() {
        let (mut deflater, mut inflater) = (HeaderDeflater::default(), HeaderInflater::default());
        for block in [
            &b"\0\0\0\0"[..],
            b"\0\0\0\x01\0\0\0\x04port\0\0\0\x0280",
            &[7u8; 5000],
        ] {
            let compressed = deflater.deflate(block).expect("deflate");
            assert_eq!(inflater.inflate(&compressed).expect("inflate"), block);
        }
    }

    #[test]
    fn first_block_names_the_dictionary() {
        let compressed = HeaderDeflater::default()
            .deflate(b"\0\0\0\0")
            .expect("deflate");
        // CMF 0x78, FLG with FDICT, then the dictionary's Adler-32: what Go's writer sends.
        assert_eq!(&compressed[..2], &[0x78, 0xf9]);
        assert_eq!(&compressed[2..6], &SPDY3_DICTIONARY_ADLER32.to_be_bytes());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(
            HeaderInflater::default()
                .inflate(b"\x78\xf9garbage!")
                .is_err()
        );
    }
}
