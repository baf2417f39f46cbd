//! The crate's error type.

use std::path::PathBuf;

/// What the edge API fails with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node's CA could not be made, loaded or used to issue the serving certificate.
    #[error("edge API certificate authority: {action}")]
    Pki {
        /// What was being done.
        action: &'static str,
        /// The PKI error.
        #[source]
        source: verge_pki::Error,
    },
    /// A file of the node's CA could not be read or written.
    #[error("edge API certificate authority file {path}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
