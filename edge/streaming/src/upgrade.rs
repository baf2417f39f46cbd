//! The HTTP/1.1 upgrade to SPDY/3.1 as a kubelet answers it (k8s.io/streaming
//! `httpstream.Handshake` and `spdy.responseUpgrader`): protocol negotiation on
//! `X-Stream-Protocol-Version`, the upgrade-header check, and the `101 Switching Protocols`.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// Header carrying the client's protocol offers and the server's choice.
pub const PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
/// Header listing the server's protocols on a 403.
pub const ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// Why an upgrade is refused; the message texts are the kubelet's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpgradeError {
    /// No `X-Stream-Protocol-Version` header (400).
    #[error(
        "unable to upgrade: header X-Stream-Protocol-Version does not exist in request with {headers} headers"
    )]
    NoProtocolHeader {
        /// Number of distinct header names in the request.
        headers: usize,
    },
    /// The header lists no protocol (400).
    #[error(
        "unable to upgrade: header X-Stream-Protocol-Version contains [{}], but no valid protocols",
        values.join(" ")
    )]
    NoValidProtocols {
        /// The header's values.
        values: Vec<String>,
    },
    /// No protocol both sides speak (403, with `X-Accepted-Stream-Protocol-Versions`).
    #[error(
        "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
        client.join(" "),
        server.join(" ")
    )]
    NoCommonProtocol {
        /// What the client offered.
        client: Vec<String>,
        /// What this server speaks.
        server: Vec<&'static str>,
    },
    /// `Connection: Upgrade` or `Upgrade: SPDY/3.1` missing (400).
    #[error("unable to upgrade: missing upgrade headers in request")]
    MissingUpgradeHeaders,
}

impl IntoResponse for UpgradeError {
    fn into_response(self) -> Response {
        let status = match self {
            Self::NoCommonProtocol { .. } => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut response = plain_error(status, &self.to_string());
        if let Self::NoCommonProtocol { server, .. } = &self {
            for protocol in server {
                response.headers_mut().append(
                    ACCEPTED_PROTOCOL_VERSIONS,
                    HeaderValue::from_static(protocol),
                );
            }
        }
        response
    }
}

/// A plain-text error as Go's `http.Error` writes it (message + `\n`).
pub fn plain_error(status: StatusCode, message: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{message}\n")));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Checks the request and picks the protocol: the first client-listed value (every header
/// line split on commas, trimmed) that `server` contains.
///
/// # Errors
/// The [`UpgradeError`] to answer with.
pub fn negotiate(
    headers: &HeaderMap,
    server: &[&'static str],
) -> Result<&'static str, UpgradeError> {
    let values: Vec<String> = headers
        .get_all(PROTOCOL_VERSION)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    if values.is_empty() {
        return Err(UpgradeError::NoProtocolHeader {
            headers: headers.keys_len(),
        });
    }
    let client: Vec<String> = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    if client.is_empty() {
        return Err(UpgradeError::NoValidProtocols { values });
    }
    let chosen = client
        .iter()
        .find_map(|c| server.iter().find(|s| **s == c.as_str()).copied());
    let chosen = chosen.ok_or_else(|| UpgradeError::NoCommonProtocol {
        client,
        server: server.to_vec(),
    })?;
    let contains = |name: header::HeaderName, want: &str| {
        headers.get_all(name).iter().any(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .to_ascii_lowercase()
                .contains(want)
        })
    };
    if !contains(header::CONNECTION, "upgrade") || !contains(header::UPGRADE, "spdy/3.1") {
        return Err(UpgradeError::MissingUpgradeHeaders);
    }
    Ok(chosen)
}

/// The `101 Switching Protocols` answer: `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the
/// chosen `X-Stream-Protocol-Version`.
pub fn switching_protocols(protocol: &'static str) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    headers.insert(PROTOCOL_VERSION, HeaderValue::from_static(protocol));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &[&str] = &[
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "v2.channel.k8s.io",
    ];

    fn request(protocols: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        for p in protocols {
            headers.append(PROTOCOL_VERSION, HeaderValue::from_str(p).expect("value"));
        }
        headers
    }

    #[test]
    fn client_preference_wins() {
        let headers = request(&["v4.channel.k8s.io", "v5.channel.k8s.io"]);
        assert_eq!(negotiate(&headers, SERVER), Ok("v4.channel.k8s.io"));
        let headers = request(&["v3.channel.k8s.io, v2.channel.k8s.io"]);
        assert_eq!(negotiate(&headers, SERVER), Ok("v2.channel.k8s.io"));
    }

    #[test]
    fn refusals_carry_the_kubelet_texts() {
        let error = negotiate(&request(&[]), SERVER).expect_err("no header");
        assert_eq!(
            error.to_string(),
            "unable to upgrade: header X-Stream-Protocol-Version does not exist in request with 2 headers"
        );
        let error = negotiate(&request(&[" , "]), SERVER).expect_err("empty");
        assert_eq!(
            error.to_string(),
            "unable to upgrade: header X-Stream-Protocol-Version contains [ , ], but no valid protocols"
        );
        let error = negotiate(&request(&["channel.k8s.io"]), SERVER).expect_err("none common");
        assert_eq!(
            error.to_string(),
            "unable to upgrade: unable to negotiate protocol: client supports [channel.k8s.io], \
             server accepts [v5.channel.k8s.io v4.channel.k8s.io v2.channel.k8s.io]"
        );
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            response
                .headers()
                .get_all(ACCEPTED_PROTOCOL_VERSIONS)
                .iter()
                .count(),
            3
        );

        let mut headers = request(&["v4.channel.k8s.io"]);
        headers.remove(header::UPGRADE);
        let error = negotiate(&headers, SERVER).expect_err("no upgrade");
        assert_eq!(error, UpgradeError::MissingUpgradeHeaders);
        assert_eq!(error.into_response().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn switching_protocols_names_spdy_and_the_choice() {
        let response = switching_protocols("portforward.k8s.io");
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(response.headers()[header::UPGRADE], "SPDY/3.1");
        assert_eq!(response.headers()[header::CONNECTION], "Upgrade");
        assert_eq!(response.headers()[PROTOCOL_VERSION], "portforward.k8s.io");
    }
}
