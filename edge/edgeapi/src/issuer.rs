//! The service-account token issuer's keys, kept so that the node verifies tokens offline
//! that the API server never saw from it (a token edged rotated into a pod's projected volume
//! just before the cut, one a pod had not used yet).
//!
//! While online the edge API fetches the issuer's public keys from the API server's
//! service-account issuer discovery (`GET /openid/v1/jwks`, a JSON Web Key Set, readable by
//! every service account through the `system:service-account-issuer-discovery` binding) with
//! a pod's token, and keeps them ([`crate::cache::ApiCache::keep_issuer`]). It learns which
//! issuers (`iss`) and audiences (`aud`) the API server accepts from the bound tokens the API
//! server authenticated (only single-audience ones, so an extra audience of a multi-audience
//! token is never taken for one the API server accepts).
//!
//! [`IssuerKeys::verify`] accepts a token as the API server's `serviceaccount` authenticator
//! does for bound tokens, never more loosely: a signature by one of the keys (RS256/384/512,
//! ES256/384), an issuer and an audience the API server accepted, `exp` required and not
//! past (no leeway), `nbf` honoured, a pod binding required. The pod binding itself is
//! checked against the node's pods by [`crate::handler`] for every request.

use std::collections::BTreeSet;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};

use crate::authn::Claims;

/// How often the keys are fetched again while online, in seconds (the API server rotates
/// keys rarely; a new key's tokens fall back to the authenticated-token path until then).
pub const REFRESH_SECS: u64 = 3600;

/// How long after a failed fetch the next is tried, in seconds.
pub const RETRY_SECS: u64 = 60;

/// The path of the API server's key set (service-account issuer discovery).
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// Largest key set accepted, in bytes.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The algorithms the API server signs service-account tokens with that the node verifies.
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// What the node knows of the token issuer; see the module docs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IssuerKeys {
    /// The issuer's public keys, if fetched.
    pub jwks: Option<JwkSet>,
    /// When the keys were fetched, seconds since the Unix epoch.
    #[serde(default)]
    pub fetched_at: u64,
    /// Issuers of bound tokens the API server authenticated.
    #[serde(default)]
    pub issuers: BTreeSet<String>,
    /// Single audiences of bound tokens the API server authenticated.
    #[serde(default)]
    pub audiences: BTreeSet<String>,
}

impl IssuerKeys {
    /// Learns the issuer and audience of a bound token the API server authenticated; whether
    /// anything new was learnt.
    pub fn learn(&mut self, claims: &Claims) -> bool {
        if claims.pod_uid().is_none() || claims.exp.is_none() || claims.iss.is_empty() {
            return false;
        }
        let mut changed = self.issuers.insert(claims.iss.clone());
        if let [one] = claims.aud.as_slice() {
            changed |= self.audiences.insert(one.clone());
        }
        changed
    }

    /// Whether the keys should be fetched (again) at `now`, seconds since the Unix epoch.
    pub fn stale(&self, now: u64) -> bool {
        self.jwks.is_none() || now.saturating_sub(self.fetched_at) >= REFRESH_SECS
    }

    /// The claims of `token` if it verifies (see the module docs) at `now`, seconds since the
    /// Unix epoch.
    ///
    /// # Errors
    /// Why it does not, as text for the 401's message.
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, String> {
        let jwks = self
            .jwks
            .as_ref()
            .ok_or("the service-account issuer's keys were never fetched")?;
        if self.issuers.is_empty() || self.audiences.is_empty() {
            return Err("no issuer or audience the API server accepts is known".into());
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("token: {e}"))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(format!("token algorithm {:?} is not accepted", header.alg));
        }
        let candidates: Vec<_> = match header.kid.as_deref() {
            Some(kid) => jwks.find(kid).into_iter().collect(),
            None => jwks.keys.iter().collect(),
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = 0;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.set_issuer(&self.issuers.iter().collect::<Vec<_>>());
        validation.set_audience(&self.audiences.iter().collect::<Vec<_>>());
        let mut last = "no key of the issuer matches the token's key id".to_owned();
        for jwk in candidates {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
                Ok(data) => {
                    let claims = data.claims;
                    if claims.pod_uid().is_none() {
                        return Err("offline, only tokens bound to a pod are verified".into());
                    }
                    if claims.expired_at(now) {
                        return Err("the service account token has expired".into());
                    }
                    return Ok(claims);
                }
                Err(e) => last = format!("token: {e}"),
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};

    fn b64(v: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
    }

    /// A P-256 key (as `sa.key` of the test control plane) and its JWK set.
    fn key() -> (EcdsaKeyPair, JwkSet) {
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("pair");
        let point = pair.public_key().as_ref(); // 0x04 || x || y
        let jwks = serde_json::from_value(serde_json::json!({ "keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig", "alg": "ES256",
            "x": b64(&point[1..33]), "y": b64(&point[33..65]) }] }))
        .expect("jwks");
        (pair, jwks)
    }

    fn sign(pair: &EcdsaKeyPair, kid: &str, claims: &serde_json::Value) -> String {
        let input = format!(
            "{}.{}",
            b64(format!(r#"{{"alg":"ES256","kid":"{kid}"}}"#).as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", b64(sig.as_ref()))
    }

    fn claims(exp: u64, aud: &str) -> serde_json::Value {
        serde_json::json!({ "iss": "https://issuer", "sub": "system:serviceaccount:shop:default",
            "aud": [aud], "exp": exp, "nbf": 100,
            "kubernetes.io": { "namespace": "shop", "pod": { "name": "web", "uid": "u-1" } } })
    }

    #[test]
    fn a_bound_token_of_the_kept_keys_verifies_and_nothing_looser_does() {
        // jsonwebtoken checks `exp` against the clock too.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let (pair, jwks) = key();
        let mut issuer = IssuerKeys::default();
        let learnt: Claims = serde_json::from_value(claims(now + 600, "api")).expect("claims");
        assert!(issuer.learn(&learnt) && !issuer.learn(&learnt));
        let token = sign(&pair, "k1", &claims(now + 600, "api"));
        assert!(issuer.verify(&token, now).is_err(), "no keys yet");
        issuer.jwks = Some(jwks);
        let verified = issuer.verify(&token, now).expect("verifies");
        assert_eq!(verified.pod_uid(), Some("u-1"));
        // Expired (no leeway), another audience, another key id, a tampered payload.
        assert!(issuer.verify(&token, now + 600).is_err());
        assert!(
            issuer
                .verify(&sign(&pair, "k1", &claims(now - 1, "api")), now)
                .is_err()
        );
        assert!(
            issuer
                .verify(&sign(&pair, "k1", &claims(now + 600, "vault")), now)
                .is_err()
        );
        assert!(
            issuer
                .verify(&sign(&pair, "k2", &claims(now + 600, "api")), now)
                .is_err()
        );
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = b64(claims(now + 6000, "api").to_string().as_bytes());
        assert!(issuer.verify(&parts.join("."), now).is_err());
        // Another key pair with the same key id: the signature fails.
        let (other, _) = key();
        assert!(
            issuer
                .verify(&sign(&other, "k1", &claims(now + 600, "api")), now)
                .is_err()
        );
        // Not bound to a pod.
        let mut unbound = claims(now + 600, "api");
        unbound["kubernetes.io"]["pod"] = serde_json::Value::Null;
        assert!(issuer.verify(&sign(&pair, "k1", &unbound), now).is_err());
    }

    #[test]
    fn only_single_audiences_of_bound_tokens_are_learnt() {
        let mut issuer = IssuerKeys::default();
        let mut two = claims(5000, "api");
        two["aud"] = serde_json::json!(["api", "vault"]);
        assert!(issuer.learn(&serde_json::from_value(two).expect("claims")));
        assert!(issuer.audiences.is_empty());
        let mut unbound = claims(5000, "api");
        unbound["kubernetes.io"] = serde_json::Value::Null;
        assert!(!issuer.learn(&serde_json::from_value(unbound).expect("claims")));
        assert!(issuer.stale(0));
    }
}
