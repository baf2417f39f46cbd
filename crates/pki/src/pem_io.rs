//! PEM in and out: certificates, certificate chains and private keys, from text or files.
//!
//! Private key files are written with mode 0600 through a temporary file renamed into place,
//! so a reader never sees a half-written key and other users never see it at all.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};
use crate::secret::PrivateKeyPem;

/// Every `CERTIFICATE` block of `pem_text`, in order (leaf first for a chain).
///
/// # Errors
/// [`Error::Pem`] for a broken block, [`Error::NoPem`] when there is none.
pub fn certs_from_pem(pem_text: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem_text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::Pem {
            label: "CERTIFICATE",
            source,
        })?;
    if certs.is_empty() {
        return Err(Error::NoPem {
            label: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The first `CERTIFICATE` block of `pem_text`.
///
/// # Errors
/// As [`certs_from_pem`].
pub fn cert_from_pem(pem_text: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem_text.as_bytes()).map_err(|source| match source {
        pem::Error::NoItemsFound => Error::NoPem {
            label: "CERTIFICATE",
        },
        source => Error::Pem {
            label: "CERTIFICATE",
            source,
        },
    })
}

/// The first private key (PKCS#8, SEC1 or PKCS#1 PEM) of `key`.
///
/// # Errors
/// [`Error::Pem`] / [`Error::NoPem`].
pub fn private_key_from_pem(key: &PrivateKeyPem) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|source| match source {
        pem::Error::NoItemsFound => Error::NoPem {
            label: "PRIVATE KEY",
        },
        source => Error::Pem {
            label: "PRIVATE KEY",
            source,
        },
    })
}

/// Encodes DER certificate bytes as one PEM `CERTIFICATE` block (LF line endings).
pub fn cert_to_pem(der: &[u8]) -> String {
    ::pem::encode_config(
        &::pem::Pem::new("CERTIFICATE", der),
        ::pem::EncodeConfig::new().set_line_ending(::pem::LineEnding::LF),
    )
}

/// Reads a PEM file (certificate, chain or CA bundle) as text.
///
/// # Errors
/// [`Error::Io`].
pub fn read_pem_file(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| io_error("read", path, source))
}

/// Reads a private key file.
///
/// # Errors
/// [`Error::Io`].
pub fn read_private_key_file(path: &Path) -> Result<PrivateKeyPem> {
    read_pem_file(path).map(PrivateKeyPem::new)
}

/// Writes a certificate (public) PEM file with mode 0644, atomically.
///
/// # Errors
/// [`Error::Io`].
pub fn write_cert_file(path: &Path, pem_text: &str) -> Result<()> {
    write_atomic(path, pem_text.as_bytes(), 0o644)
}

/// Writes a private key PEM file with mode 0600 (owner only), atomically.
///
/// # Errors
/// [`Error::Io`].
pub fn write_private_key_file(path: &Path, key: &PrivateKeyPem) -> Result<()> {
    write_atomic(path, key.expose().as_bytes(), 0o600)
}

/// Writes `<path>.tmp` created with `mode`, syncs it and renames it over `path`.
fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(".tmp");
    // A stale temporary file may have other permissions; start afresh.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(io_error("remove", &tmp, source)),
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|source| io_error("create", &tmp, source))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|source| io_error("write", &tmp, source))?;
    fs::rename(&tmp, path).map_err(|source| io_error("rename into place", path, source))
}

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn private_key_file_is_owner_only_and_round_trips() -> Result<()> {
        let dir =
            tempfile::tempdir().map_err(|source| io_error("create", Path::new("tmp"), source))?;
        let path = dir.path().join("node.key");
        let key =
            PrivateKeyPem::new("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        write_private_key_file(&path, &key)?;
        // Overwriting keeps the mode (the temporary file is created afresh).
        write_private_key_file(&path, &key)?;
        let mode = fs::metadata(&path)
            .map_err(|s| io_error("stat", &path, s))?
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_private_key_file(&path)?, key);
        Ok(())
    }

    #[test]
    fn empty_text_has_no_certificate() {
        assert!(matches!(
            certs_from_pem(""),
            Err(Error::NoPem {
                label: "CERTIFICATE"
            })
        ));
        assert!(matches!(cert_from_pem("junk"), Err(Error::NoPem { .. })));
    }
}
