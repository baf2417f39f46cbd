//! Strict YAML configuration parsing, shared by every Verge binary (architecture.md §5).
//!
//! Each binary's configuration struct derives `serde::Deserialize` with
//! `#[serde(deny_unknown_fields, default)]`, so an empty file yields the documented defaults
//! and an unknown or mistyped field is an error that names the field, the line and the
//! column. This module parses text only; reading the file is the binary's job.

use serde::de::DeserializeOwned;

/// A configuration file that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration in {source_name}: {message}")]
pub struct ConfigError {
    /// Where the text came from (usually the file path).
    pub source_name: String,
    /// The parser's message, naming the offending field and its position.
    pub message: String,
}

/// Parses `text` (YAML) into `T`. Empty text (or only comments) yields `T::default()`.
///
/// # Errors
/// [`ConfigError`] naming `source_name` and the offending field, e.g.
/// `invalid configuration in edgecore.yaml: unknown field `nodname`, expected one of ...
/// at line 2 column 1`.
pub fn from_yaml<T: DeserializeOwned + Default>(
    text: &str,
    source_name: &str,
) -> Result<T, ConfigError> {
    let meaningful = text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    });
    if !meaningful {
        return Ok(T::default());
    }
    serde_norway::from_str(text).map_err(|e| ConfigError {
        source_name: source_name.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Sample {
        /// A field.
        name: String,
        port: u16,
    }

    impl Default for Sample {
        fn default() -> Self {
            Self {
                name: "x".into(),
                port: 1,
            }
        }
    }

    #[test]
    fn empty_is_default() {
        assert_eq!(
            from_yaml::<Sample>("# nothing\n", "t").expect("ok"),
            Sample::default()
        );
    }

    #[test]
    fn partial_keeps_defaults() {
        let s: Sample = from_yaml("port: 9\n", "t").expect("ok");
        assert_eq!(
            s,
            Sample {
                name: "x".into(),
                port: 9
            }
        );
    }

    #[test]
    fn unknown_field_is_named() {
        let e = from_yaml::<Sample>("nmae: y\n", "cfg.yaml").expect_err("must fail");
        let msg = e.to_string();
        assert!(msg.contains("cfg.yaml") && msg.contains("nmae"), "{msg}");
    }
}
