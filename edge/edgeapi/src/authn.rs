//! Who a request is: the bearer token of its `Authorization` header, a service-account JWT
//! (`kubernetes.io` claims of a bound token, as the API server's `serviceaccount`
//! authenticator writes them). [`Claims::of`] reads the claims without checking anything; the
//! edge API uses them unchecked only to refuse (an expired token, a pod of another node).
//! A token counts as authentic once the API server has authenticated it (any answer but 401
//! to a request carrying it, [`crate::cache::ApiCache::remember_token`]), or offline when its
//! signature verifies with the issuer's keys kept while online ([`crate::issuer`]).

use base64::Engine as _;
use http::HeaderMap;
use serde::Deserialize;

/// The bearer token of `headers` (`Authorization: Bearer <token>`).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A token's fingerprint: the hex SHA-256 of its bytes (what the node keeps, never the
/// token).
pub fn fingerprint(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The claims of a service-account JWT the edge API reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Claims {
    /// `sub`: the user, `system:serviceaccount:<namespace>:<name>`.
    #[serde(default)]
    pub sub: String,
    /// `iss`: the issuer (the API server's `--service-account-issuer`).
    #[serde(default)]
    pub iss: String,
    /// `aud`: the audiences (a string or an array in the token).
    #[serde(default, deserialize_with = "audiences")]
    pub aud: Vec<String>,
    /// `exp`: expiry, seconds since the Unix epoch.
    pub exp: Option<u64>,
    /// `kubernetes.io`: what the token is bound to.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: Option<KubernetesClaims>,
}

/// `aud` as RFC 7519 §4.1.3 allows it: one string or an array of strings.
fn audiences<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(one) => vec![one],
        Aud::Many(many) => many,
    })
}

/// The `kubernetes.io` claim of a bound service-account token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct KubernetesClaims {
    /// The service account's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The pod the token is bound to (`boundObjectRef` kind `Pod`).
    pub pod: Option<BoundObject>,
}

/// A bound object (name and uid).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct BoundObject {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its uid.
    #[serde(default)]
    pub uid: String,
}

impl Claims {
    /// The claims of JWT `token` (its payload, base64url JSON), or `None` for a token that is
    /// no JWT (e.g. a bootstrap token).
    pub fn of(token: &str) -> Option<Self> {
        let payload = token.split('.').nth(1)?;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        serde_json::from_slice(&json).ok()
    }

    /// The uid of the pod the token is bound to, if any.
    pub fn pod_uid(&self) -> Option<&str> {
        self.kubernetes
            .as_ref()?
            .pod
            .as_ref()
            .map(|p| p.uid.as_str())
            .filter(|uid| !uid.is_empty())
    }

    /// Whether the token has expired at `now` (seconds since the Unix epoch).
    pub fn expired_at(&self, now: u64) -> bool {
        self.exp.is_some_and(|exp| exp <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &serde_json::Value) -> String {
        let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.sig",
            b64(b"{\"alg\":\"RS256\"}"),
            b64(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn bound_token_claims_are_read() {
        let token = jwt(&serde_json::json!({
            "sub": "system:serviceaccount:shop:default", "exp": 2000,
            "kubernetes.io": { "namespace": "shop", "pod": { "name": "web", "uid": "u-1" },
                "serviceaccount": { "name": "default", "uid": "s" } } }));
        let claims = Claims::of(&token).expect("claims");
        assert!(claims.aud.is_empty());
        let with_aud = jwt(&serde_json::json!({ "aud": "api", "iss": "i" }));
        assert_eq!(Claims::of(&with_aud).expect("claims").aud, ["api"]);
        let with_auds = jwt(&serde_json::json!({ "aud": ["a", "b"] }));
        assert_eq!(Claims::of(&with_auds).expect("claims").aud, ["a", "b"]);
        assert_eq!(claims.sub, "system:serviceaccount:shop:default");
        assert_eq!(claims.pod_uid(), Some("u-1"));
        assert!(claims.expired_at(2000) && !claims.expired_at(1999));
        assert_eq!(Claims::of("not-a-jwt"), None);
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().expect("header"),
        );
        assert_eq!(bearer(&headers), Some(token.as_str()));
        assert_eq!(fingerprint("a").len(), 64);
    }
}
