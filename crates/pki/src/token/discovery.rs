//! Token-based CA discovery: the server proves it knows a bootstrap token's secret by a MAC
//! over the CA certificate, so a joining node can trust a CA it fetched over an unverified
//! connection without a pinned hash (kubeadm signs its `cluster-info` with the token for the
//! same reason).

use ring::hmac;

use super::BootstrapToken;

/// HMAC-SHA256 of `ca_cert_der` keyed with `token`'s secret.
pub fn ca_mac(token: &BootstrapToken, ca_cert_der: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, token.secret().as_bytes());
    hmac::sign(&key, ca_cert_der).as_ref().to_vec()
}

/// Whether `mac` is [`ca_mac`] of `ca_cert_der` for `token` (compared in constant time).
pub fn verify_ca_mac(token: &BootstrapToken, ca_cert_der: &[u8], mac: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, token.secret().as_bytes());
    hmac::verify(&key, ca_cert_der, mac).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_verifies_only_with_the_same_token_and_certificate() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").expect("token");
        let other = BootstrapToken::parse("abcdef.fedcba9876543210").expect("token");
        let mac = ca_mac(&token, b"certificate");
        assert!(verify_ca_mac(&token, b"certificate", &mac));
        assert!(!verify_ca_mac(&other, b"certificate", &mac));
        assert!(!verify_ca_mac(&token, b"certificatf", &mac));
        assert!(!verify_ca_mac(&token, b"certificate", &mac[1..]));
    }
}
