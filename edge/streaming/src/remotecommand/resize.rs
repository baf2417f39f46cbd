//! The resize stream: concatenated JSON objects `{"Width":W,"Height":H}` (Go field names;
//! client-go's `json.Encoder` ends each with `\n`). Keys match case-insensitively, as Go's
//! `encoding/json` does.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::Error;
pub use verge_container_runtime::TerminalSize;

/// Largest partial object kept while waiting for its end.
const MAX_PENDING: usize = 4096;

/// Splits the stream's bytes into sizes, across any DATA frame boundaries.
#[derive(Debug, Default)]
pub struct ResizeDecoder {
    pending: Vec<u8>,
}

impl ResizeDecoder {
    /// Feeds received bytes; returns the sizes completed by them.
    ///
    /// # Errors
    /// [`Error::Resize`] for bytes that are not such JSON objects.
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<TerminalSize>, Error> {
        self.pending.extend_from_slice(data);
        let mut sizes = Vec::new();
        let mut objects =
            serde_json::Deserializer::from_slice(&self.pending).into_iter::<Map<String, Value>>();
        let mut consumed = 0;
        loop {
            match objects.next() {
                Some(Ok(object)) => {
                    consumed = objects.byte_offset();
                    sizes.push(TerminalSize {
                        width: field(&object, "width")?,
                        height: field(&object, "height")?,
                    });
                }
                Some(Err(error)) if error.is_eof() => break,
                Some(Err(error)) => return Err(Error::Resize(error)),
                None => {
                    consumed = self.pending.len();
                    break;
                }
            }
        }
        self.pending.drain(..consumed);
        if self.pending.len() > MAX_PENDING {
            return Err(Error::ResizeTooLong);
        }
        Ok(sizes)
    }
}

/// A u16 field, its name matched case-insensitively; absent is 0, as in Go.
fn field(object: &Map<String, Value>, name: &str) -> Result<u16, Error> {
    object
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map_or(Ok(0), |(_, value)| {
            u16::deserialize(value).map_err(Error::Resize)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_objects_split_across_frames() {
        let mut decoder = ResizeDecoder::default();
        assert_eq!(decoder.push(b"{\"Width\":80,").expect("ok"), vec![]);
        assert_eq!(
            decoder
                .push(b"\"Height\":24}\n{\"width\":100,\"height\":50}\n{\"Wid")
                .expect("ok"),
            vec![
                TerminalSize {
                    width: 80,
                    height: 24
                },
                TerminalSize {
                    width: 100,
                    height: 50
                }
            ]
        );
        assert_eq!(
            decoder.push(b"th\":1,\"Height\":2}").expect("ok"),
            vec![TerminalSize {
                width: 1,
                height: 2
            }]
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(ResizeDecoder::default().push(b"[1,2]").is_err());
        assert!(ResizeDecoder::default().push(b"{\"Width\":70000}").is_err());
    }
}
