//! Kubernetes `Status` answers (`meta/v1 Status`, as the API server writes its failures):
//! client-go, kube-rs and kubectl show their `message` and act on `reason` and `code`.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

/// A `Status` failure with HTTP status `code`, `reason` (a `StatusReason`, e.g.
/// `ServiceUnavailable`) and `message`, as a JSON response.
pub fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer while the API server cannot be reached: 503 `ServiceUnavailable`, its message
/// naming the cut link and `why`.
pub fn offline(why: &str) -> Response<Full<Bytes>> {
    failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        &format!(
            "the edge node's link to the cloud is down ({why}): the edge API cannot reach the API server"
        ),
    )
}
