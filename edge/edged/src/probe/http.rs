//! `httpGet` probes and hooks (kubelet: `probe/http`): one GET per hop, following redirects
//! only to the same host name (kubelet: `RedirectChecker(false)`), at most 10 of them. A
//! 200–299 answer is a success; a 3xx that is not followed (to another host, or without a
//! `Location`) is a success with a warning carrying the answer's body (kubelet:
//! `probe.Warning`, `Probe terminated redirects, Response body: ...`, which the prober
//! records as a `ProbeWarning` event); anything else is a failure.

use http_body_util::{BodyExt as _, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, LOCATION};
use hyper::{Request, Response, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::USER_AGENT;
use super::error::ProbeError;

/// The client probes share.
pub(super) type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// How many redirects are followed before the probe fails (kubelet, as Go's client: 10).
const MAX_REDIRECTS: usize = 10;
/// How much of a body is kept for the warning, in bytes (kubelet: `maxRespBodyLength`, 10 KiB).
const MAX_BODY: usize = 10 * 1024;

/// GETs `url` with `headers` (which replace the defaults `User-Agent`, `Accept`, `Host`),
/// following same-host redirects. `Ok(None)` is a success, `Ok(Some(warning))` a success
/// with a warning.
///
/// # Errors
/// The request cannot be built or sent, a status outside 200–399, or too many redirects.
pub(super) async fn get(
    client: &HttpClient,
    url: Uri,
    headers: &[(String, String)],
) -> Result<Option<String>, ProbeError> {
    let first_host = url.host().map(str::to_owned);
    let mut current = url;
    let mut hops = 0;
    loop {
        let response = send(client, &current, headers).await?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(None);
        }
        if !(300..400).contains(&status) {
            return Err(ProbeError::Status(status));
        }
        let next = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| resolve(&current, l));
        match next {
            Some(next) if next.host().map(str::to_owned) == first_host => {
                if hops == MAX_REDIRECTS {
                    return Err(ProbeError::Redirects(MAX_REDIRECTS));
                }
                hops += 1;
                current = next;
            }
            _ => {
                let body = read_body(response).await;
                return Ok(Some(format!(
                    "Probe terminated redirects, Response body: {body}"
                )));
            }
        }
    }
}

/// One GET of `url`.
async fn send(
    client: &HttpClient,
    url: &Uri,
    headers: &[(String, String)],
) -> Result<Response<Incoming>, ProbeError> {
    let mut request = Request::get(url)
        .header("user-agent", USER_AGENT)
        .header("accept", "*/*")
        .header("connection", "close");
    for (name, value) in headers {
        // Probe headers replace the defaults (e.g. `Host`, `User-Agent`).
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(name), Ok(value)) => {
                if let Some(h) = request.headers_mut() {
                    h.insert(name, value);
                }
            }
            _ => return Err(ProbeError::Header(name.clone())),
        }
    }
    let request = request
        .body(Empty::new())
        .map_err(|source| ProbeError::Request {
            url: url.to_string(),
            source,
        })?;
    client
        .request(request)
        .await
        .map_err(|source| ProbeError::Get {
            url: url.to_string(),
            source,
        })
}

/// `location` resolved against `base` (absolute, scheme-relative, absolute or relative path,
/// as RFC 3986); `None` when it is not a URL.
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    let base = url::Url::parse(&base.to_string()).ok()?;
    base.join(location).ok()?.as_str().parse().ok()
}

/// Up to [`MAX_BODY`] bytes of `response`'s body, as text (an unreadable body reads empty).
async fn read_body(response: Response<Incoming>) -> String {
    let mut body = response.into_body();
    let mut kept = Vec::new();
    while kept.len() < MAX_BODY {
        let Some(Ok(frame)) = body.frame().await else {
            break;
        };
        if let Ok(data) = frame.into_data() {
            kept.extend_from_slice(&data);
        }
    }
    kept.truncate(MAX_BODY);
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_as_a_browser_would() {
        let base: Uri = "http://10.0.0.1:8080/redirect?loc=x".parse().expect("uri");
        let r = |l| resolve(&base, l).map(|u| u.to_string());
        assert_eq!(
            r("/healthz").as_deref(),
            Some("http://10.0.0.1:8080/healthz")
        );
        assert_eq!(
            r("healthz").as_deref(),
            Some("http://10.0.0.1:8080/healthz")
        );
        assert_eq!(r("http://0.0.0.0/").as_deref(), Some("http://0.0.0.0/"));
        assert_eq!(r("//other:1/x").as_deref(), Some("http://other:1/x"));
    }
}
