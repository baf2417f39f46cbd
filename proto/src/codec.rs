//! The protobuf codec of every generated client and server: prost's, with a smaller first
//! buffer per call.
//!
//! tonic gives each call an encode buffer and a decode buffer of
//! `BufferSettings::buffer_size` bytes when it starts (8 KiB by default). cloudhub holds one
//! long-lived `EdgeHub.Connect` call per edge node, so the defaults cost it 16 KiB per
//! session up front, though an idle session moves keepalives of about 100 bytes. Here the
//! buffers start at [`INITIAL_BUFFER`] and grow as a larger message needs (tonic reserves
//! what a message needs); the yield threshold of the encoder stays tonic's.

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// The first size of a call's encode and decode buffers, bytes.
pub const INITIAL_BUFFER: usize = 256;

/// tonic's default encoder yield threshold (32 KiB): an encoder hands its buffer to the
/// transport once it holds this much.
const YIELD_THRESHOLD: usize = 32 * 1024;

fn settings() -> BufferSettings {
    BufferSettings::new(INITIAL_BUFFER, YIELD_THRESHOLD)
}

/// prost's codec with [`INITIAL_BUFFER`]-byte first buffers (the generated code's
/// `codec_path`).
#[derive(Debug, Clone)]
pub struct Prost<T, U>(ProstCodec<T, U>);

impl<T, U> Default for Prost<T, U> {
    fn default() -> Self {
        Self(ProstCodec::default())
    }
}

impl<T, U> Codec for Prost<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::{Codec as _, Decoder as _, Encoder as _};

    use super::*;
    use crate::Message;

    #[test]
    fn buffers_start_small_and_keep_the_yield_threshold() {
        let mut codec = Prost::<Message, Message>::default();
        let (encoder, decoder) = (codec.encoder(), codec.decoder());
        // `BufferSettings` shows its fields only through `Debug`.
        let expected = format!("{:?}", settings());
        assert!(
            expected.contains(&format!("buffer_size: {INITIAL_BUFFER}")),
            "{expected}"
        );
        assert!(
            expected.contains(&format!("yield_threshold: {YIELD_THRESHOLD}")),
            "{expected}"
        );
        for s in [encoder.buffer_settings(), decoder.buffer_settings()] {
            assert_eq!(format!("{s:?}"), expected);
        }
    }
}
