//! The TLS client of HTTPS probes. Like the kubelet's HTTP prober (`probe/http`:
//! `InsecureSkipVerify: true`), the server's certificate chain and name are not checked: a
//! probe asks "does the container answer", not "is it who it claims to be". The handshake
//! signatures are still verified, so the peer must hold the key of the certificate it sends
//! (`verge_pki::tls::unverified_client_config`).

use rustls::ClientConfig;

/// A client configuration (ring provider, TLS 1.2 and 1.3, no ALPN, no client certificate) that
/// accepts any server certificate.
///
/// # Panics
/// Never: the ring provider supports TLS 1.2 and 1.3.
pub(super) fn insecure_client_config() -> ClientConfig {
    verge_pki::tls::unverified_client_config()
        .expect("the ring provider supports the Verge TLS versions")
}
