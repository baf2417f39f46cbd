//! verge-pki tests against real rcgen, x509-parser, rustls and OpenSSL-made fixtures.

mod ca;
mod cert_info;
mod csr;
mod tls;
mod token;

use std::time::Duration;

use verge_pki::{Ca, NodeKey, Result};

/// One day.
pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// A fresh CA valid for a year.
pub fn new_ca(name: &str) -> Result<Ca> {
    Ca::generate(name, 365 * DAY)
}

/// A node certificate PEM for `node` signed by `ca` from a CSR made by a fresh key, and the key.
pub fn node_cert(ca: &Ca, node: &str) -> Result<(String, NodeKey)> {
    let key = NodeKey::generate()?;
    let csr = verge_pki::CsrRequest::parse(&key.csr_pem(node)?)?;
    Ok((ca.sign_client_csr(&csr, 30 * DAY)?, key))
}
