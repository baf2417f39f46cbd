//! A fake API server behind a kube client, for unit tests of the reads and writes made as a
//! node: it answers by method and path and records who asked for what.

use std::sync::{Arc, Mutex};

/// One request the fake API server saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The impersonated user (`Impersonate-User`), empty when none.
    pub user: String,
    /// The HTTP method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query string.
    pub query: String,
    /// The request body.
    pub body: Vec<u8>,
}

/// Every request seen, in order.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// A client whose requests `answer(method, path)` answers with a status and a JSON body.
pub fn client(
    answer: impl Fn(&str, &str) -> (u16, serde_json::Value) + Clone + Send + Sync + 'static,
) -> (kube::Client, Log) {
    let log = Log::default();
    let record = Arc::clone(&log);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (answer, record) = (answer.clone(), Arc::clone(&record));
        async move {
            let (parts, body) = request.into_parts();
            let user = parts
                .headers
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = body.collect_bytes().await.unwrap_or_default().to_vec();
            let (method, path) = (parts.method.to_string(), parts.uri.path().to_owned());
            let (status, json) = answer(&method, &path);
            record.lock().expect("lock").push(Seen {
                user,
                method,
                path,
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body,
            });
            http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(json.to_string().into_bytes()))
        }
    });
    (kube::Client::new(service, "default"), log)
}

/// An API `Status` of a failure.
pub fn status(code: u16, reason: &str) -> serde_json::Value {
    serde_json::json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": format!("refused: {reason}") })
}
