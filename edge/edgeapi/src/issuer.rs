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
//! ES256/384, verified with ring), an issuer and an audience the API server accepted, `exp`
//! required and not past (no leeway), `nbf` honoured, claims of the wrong JSON type refused,
//! a pod binding required. The pod binding itself is checked against the node's pods by
//! [`crate::handler`] for every request. (jsonwebtoken was not used: its releases with the
//! fix for CVE-2026-25537, a claim of the wrong type skipping validation, no longer build on
//! ring, and would bring aws-lc or a second crypto stack into the edge agent.)

use std::collections::BTreeSet;

use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
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

/// A JSON Web Key Set (RFC 7517 §5) as the API server serves it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkSet {
    /// The keys.
    #[serde(default)]
    pub keys: Vec<Jwk>,
}

/// One public JSON Web Key (RFC 7517/7518): an RSA key (`n`, `e`) or an EC key (`crv`,
/// `x`, `y`); members other than these are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    /// `kty`: `RSA` or `EC`.
    #[serde(default)]
    pub kty: String,
    /// `kid`: the key id tokens name in their header.
    pub kid: Option<String>,
    /// `alg`, if the key is limited to one algorithm.
    pub alg: Option<String>,
    /// `crv` of an EC key: `P-256` or `P-384`.
    pub crv: Option<String>,
    /// RSA modulus, base64url big-endian.
    pub n: Option<String>,
    /// RSA exponent, base64url big-endian.
    pub e: Option<String>,
    /// EC point x, base64url.
    pub x: Option<String>,
    /// EC point y, base64url.
    pub y: Option<String>,
}

/// A JWS header's members the node reads.
#[derive(Debug, Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// The registered claims checked offline, typed strictly: a claim of the wrong JSON type
/// (an `exp` or `nbf` that is a string) fails the token rather than being skipped.
#[derive(Debug, Deserialize)]
struct Registered {
    iss: String,
    sub: String,
    exp: u64,
    nbf: Option<u64>,
}

fn b64url(part: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| format!("token: bad base64url: {e}"))
}

impl Jwk {
    /// Whether the key's signature over `message` is `sig` for JWS algorithm `alg`
    /// (RS256/384/512: RSASSA-PKCS1-v1_5, 2048 to 8192 bits; ES256/ES384: ECDSA with the
    /// fixed-width `r || s` signature JWS uses). `false` for a key of another type or curve.
    fn verifies(&self, alg: &str, message: &[u8], sig: &[u8]) -> bool {
        if self.alg.as_deref().is_some_and(|a| a != alg) {
            return false;
        }
        let decode = |v: &Option<String>| v.as_deref().and_then(|v| b64url(v).ok());
        match (self.kty.as_str(), alg) {
            ("RSA", "RS256" | "RS384" | "RS512") => {
                let (Some(n), Some(e)) = (decode(&self.n), decode(&self.e)) else {
                    return false;
                };
                let params = match alg {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    _ => &signature::RSA_PKCS1_2048_8192_SHA512,
                };
                RsaPublicKeyComponents { n: &n, e: &e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            ("EC", "ES256" | "ES384") => {
                let (params, crv, width): (&'static signature::EcdsaVerificationAlgorithm, _, _) =
                    if alg == "ES256" {
                        (&signature::ECDSA_P256_SHA256_FIXED, "P-256", 32)
                    } else {
                        (&signature::ECDSA_P384_SHA384_FIXED, "P-384", 48)
                    };
                let (Some(x), Some(y)) = (decode(&self.x), decode(&self.y)) else {
                    return false;
                };
                if self.crv.as_deref() != Some(crv) || x.len() != width || y.len() != width {
                    return false;
                }
                let mut point = Vec::with_capacity(1 + 2 * width);
                point.push(0x04);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                UnparsedPublicKey::new(params, point)
                    .verify(message, sig)
                    .is_ok()
            }
            _ => false,
        }
    }
}

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
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("token: not a JWS in compact form".into());
        };
        let header: Header =
            serde_json::from_slice(&b64url(header)?).map_err(|e| format!("token header: {e}"))?;
        if !ALGORITHMS.contains(&header.alg.as_str()) {
            return Err(format!("token algorithm {:?} is not accepted", header.alg));
        }
        let message = &token[..token.len() - sig.len() - 1];
        let sig = b64url(sig)?;
        let signed = jwks
            .keys
            .iter()
            .filter(|k| header.kid.is_none() || k.kid == header.kid)
            .any(|k| k.verifies(&header.alg, message.as_bytes(), &sig));
        if !signed {
            return Err("no key of the issuer verifies the token's signature".into());
        }
        let json = b64url(payload)?;
        let registered: Registered =
            serde_json::from_slice(&json).map_err(|e| format!("token claims: {e}"))?;
        let claims: Claims =
            serde_json::from_slice(&json).map_err(|e| format!("token claims: {e}"))?;
        if !self.issuers.contains(&registered.iss) {
            return Err(format!(
                "token issuer {:?} is not one the API server accepted",
                registered.iss
            ));
        }
        if !claims.aud.iter().any(|a| self.audiences.contains(a)) {
            return Err("no token audience is one the API server accepted".into());
        }
        if registered.sub.is_empty() {
            return Err("token has no subject".into());
        }
        if registered.exp <= now {
            return Err("the service account token has expired".into());
        }
        if registered.nbf.is_some_and(|nbf| nbf > now) {
            return Err("the service account token is not valid yet".into());
        }
        if claims.pod_uid().is_none() {
            return Err("offline, only tokens bound to a pod are verified".into());
        }
        Ok(claims)
    }
}

/// The JWS algorithms the API server signs service-account tokens with that the node
/// verifies.
const ALGORITHMS: &[&str] = &["RS256", "RS384", "RS512", "ES256", "ES384"];

#[cfg(test)]
mod tests {
    use super::*;
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

    /// A 2048-bit RSA test key (PKCS#1 DER, base64), as kubeadm's `sa.key` is RSA.
    const RSA_TEST_KEY: &[&str] = &[
        "MIIEowIBAAKCAQEAlASfFxILO9XuREFdpv0Nf6rOFQNMziTI/t72b1EwaqnjZypdYPEItsxVfP7+iBIQPgnu9+c2",
        "SQnuIjYSJGZFP889E+JxRK0o43oW9WP+OR5I1+lfPzmyZy5nJMFnQsVQY3sRoouPSpuTyUQZ5PY780agTQmmlAvM",
        "0SIWb8Gn2giqYL7qxnDEVjNDJsxfVuuAJBM7DVV0V5OL+XI9I+9eHqhNTG7QsPgWfImjja5rLrRcfvXsvDGU35Ae",
        "OZQpy7Ym/gtD8ZG12B5wsXQmEj3PWijI9tB9cJqgE7uMr5ATyA/RCbD/JYpcXsmmzBusUu+M7Aag/iuAYJ4p0xuH",
        "m87W3QIDAQABAoIBAAZJ3U8dR3g8UjTOKMzDwC4Qs1QLNtkkkPGFxtHbO4Ox7Lpg/2Sd+PEjOe08kX3LHquJaoCt",
        "Gbj9VgOtaRSTempdQ0qz+nygyrWXZfWjpj+w/LFHoJykC+NRrQolDrO0hFd6+WMpgLtPuXX55wu7i7fTOVOXObTd",
        "J3opyOrolFlb/QP0+Wmdr1RD3hV1hvTCz2W+vCA82A4pg/kcUWkt3LxS76Tnwj/+ToUmsjzmCirJjmxQ+G+qkTT3",
        "HLG2sQ+ure1FTfFMmFEE4VS5BF8y+Pgf7hFZI/O8yVmmVRHo7dThQS7QnZcaJPEgVvWafo7WW18uEVPPVmc4rOmS",
        "H0UHXxUCgYEAxAPnO96zzFPbW7BVqK1sRu/ZUFSOWaACsckAIkINkkrMMO876IC8cv3stLoCNA2+/hXjwQZzDStE",
        "19QFo0IGb1oLtN2dGzkI30vhItpaOFLNk4oeiGDcatR8po6N58G1Hp6DPOYsqzDhMNwrNqSZKlD+GcPS2ckObkTA",
        "sOv4PX8CgYEAwVCNwfmgn+6uHVeLm5LerSeGo8474C3vmjs0+evJaJLDgO8DmnVC+j8nBrU+pNUpW8lUbFFnSa+L",
        "g172cRyDOOLtZVd0Gl2iJbTrc/tb3di4RJmqsmIl4YnuwBqC4qQmtnUwPBE8KNVm/z56a7Ck0vD1qfaF7ayEaU5E",
        "cyj10aMCgYAyUCYsce+IxQWLNWnnUAx48NvBCNM5Ih9O7x7/rCC7qkNbVCz2cwTsJ0143j3uipC5u3iodTVW7gJP",
        "u/Zuf2YTcvOKS1AmSq+CUYHKZm2+A1MNSeiobORm73/HaNP35vrMjzd0jEhu8K780aat8fX2rK9sgZ0/laIEn9Uu",
        "FIO1lQKBgQCKDtFueqxwC7FlWyRlEtrcpqHNUngIfkXjy+zln7LTcB0Xc5sLMDuJJJjmfYIjjehfmMUmJmyxfyEP",
        "zT4LQeWlNst72J0eR0iJzU9qIVVWdnQC6guyIc4T6MINh+F5ounS3JZ6D4T7VIyeNSyQxDKyQ0vu+hRjzRUzb6YK",
        "6HHGKQKBgHp7aiocHNhLqFwUwKsjmfpG0796b9/dMoqGP8NkapAWnT9drZ3ewk/oBWoAkw3lEkD3PhrZGJE63erg",
        "pOzsUB0ACrP217z0HKr7Nmb+PdI/JxfmVHyIrxk3o4tkcCuptCr0ByQ5noywu10oj9cPYPpX51HooLAicr2ytiwa",
        "lOGP",
    ];

    #[test]
    fn an_rs256_token_verifies_with_its_rsa_jwk() {
        let der = base64::engine::general_purpose::STANDARD
            .decode(RSA_TEST_KEY.concat())
            .expect("key");
        let pair = ring::rsa::KeyPair::from_der(&der).expect("pair");
        let public: ring::rsa::PublicKeyComponents<Vec<u8>> = pair.public().into();
        let jwks: JwkSet = serde_json::from_value(serde_json::json!({ "keys": [{
            "kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig",
            "n": b64(&public.n), "e": b64(&public.e) }] }))
        .expect("jwks");
        let mut issuer = IssuerKeys {
            jwks: Some(jwks),
            ..IssuerKeys::default()
        };
        issuer.issuers.insert("https://issuer".into());
        issuer.audiences.insert("api".into());
        let input = format!(
            "{}.{}",
            b64(br#"{"alg":"RS256","kid":"r1"}"#),
            b64(claims(5000, "api").to_string().as_bytes())
        );
        let mut sig = vec![0; pair.public().modulus_len()];
        pair.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            input.as_bytes(),
            &mut sig,
        )
        .expect("sign");
        let token = format!("{input}.{}", b64(&sig));
        assert!(issuer.verify(&token, 1000).is_ok());
        // The same key may not be used as another algorithm's.
        let other = format!(
            "{}.{}.{}",
            b64(br#"{"alg":"RS384","kid":"r1"}"#),
            b64(claims(5000, "api").to_string().as_bytes()),
            b64(&sig)
        );
        assert!(issuer.verify(&other, 1000).is_err());
    }

    #[test]
    fn claims_of_the_wrong_type_are_refused() {
        let (pair, jwks) = key();
        let mut issuer = IssuerKeys {
            jwks: Some(jwks),
            ..IssuerKeys::default()
        };
        issuer.issuers.insert("https://issuer".into());
        issuer.audiences.insert("api".into());
        let mut late = claims(5000, "api");
        late["nbf"] = serde_json::json!("99999999999");
        assert!(issuer.verify(&sign(&pair, "k1", &late), 1000).is_err());
        let mut never = claims(5000, "api");
        never["exp"] = serde_json::json!("never");
        assert!(issuer.verify(&sign(&pair, "k1", &never), 1000).is_err());
        let mut future = claims(5000, "api");
        future["nbf"] = serde_json::json!(2000);
        assert!(issuer.verify(&sign(&pair, "k1", &future), 1000).is_err());
        assert!(
            issuer
                .verify(&sign(&pair, "k1", &claims(5000, "api")), 1000)
                .is_ok()
        );
    }
}
