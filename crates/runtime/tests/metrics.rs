//! `/metrics` on the health endpoint: the registry's OpenMetrics text with its content type,
//! over HTTP/1.0 as simple scrapers (and the e2e test's) speak it.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use verge_runtime::CancellationToken;
use verge_runtime::health::HealthEndpoint;
use verge_runtime::metrics::{CONTENT_TYPE, Registry, metrics_route};

#[tokio::test]
async fn metrics_route_serves_the_registry_as_openmetrics() {
    let mut registry = Registry::default();
    let counter: Counter = Counter::default();
    registry.register("verge_test_scrapes", "Scrapes.", counter.clone());
    counter.inc();
    let endpoint = HealthEndpoint::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("binds")
        .route("/metrics", metrics_route(registry));
    let addr = endpoint.local_addr();
    let stop = CancellationToken::new();
    let server = tokio::spawn(endpoint.serve(stop.clone()));

    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: scraper\r\n\r\n")
        .await
        .expect("writes");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("reads");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {CONTENT_TYPE}")),
        "{head}"
    );
    assert!(body.contains("verge_test_scrapes_total 1\n"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    stop.cancel();
    server.await.expect("joins").expect("serves");
}
