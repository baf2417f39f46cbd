//! Printing an error with its causes.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its [`Error::source`]s, joined by `": "` — the
/// same shape as `anyhow`'s `{:#}`, for typed errors. Used for every logged or printed
/// error so that the root cause (an I/O error, an HTTP status) is never hidden behind its
/// context.
///
/// ```
/// # #[derive(Debug)] struct Outer(std::io::Error);
/// # impl std::fmt::Display for Outer {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("opening the store") }
/// # }
/// # impl std::error::Error for Outer {
/// #     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> { Some(&self.0) }
/// # }
/// let e = Outer(std::io::Error::other("disk full"));
/// assert_eq!(verge_runtime::ErrorChain(&e).to_string(), "opening the store: disk full");
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
