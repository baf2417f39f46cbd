//! Component tests of the health endpoint: a tonic-health client and plain HTTP/1.1 against
//! the real server on a loopback port, and the whole `serve_with_health` story with a real
//! SIGTERM to this test process.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use verge_runtime::health::{HealthEndpoint, LIVENESS_SERVICE, get};
use verge_runtime::{CancellationToken, Outcome, Signal, serve_with_health};

type Client = HealthClient<tonic::transport::Channel>;

async fn client(addr: SocketAddr) -> Client {
    HealthClient::new(
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
}

async fn check(client: &mut Client, service: &str) -> ServingStatus {
    let request = HealthCheckRequest {
        service: service.to_owned(),
    };
    let status = client.check(request).await.unwrap().into_inner().status;
    ServingStatus::try_from(status).unwrap()
}

/// `GET path` over HTTP/1.1: the status code and the body.
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test]
async fn grpc_and_http_statuses_follow_readiness() {
    let endpoint = HealthEndpoint::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
        .route("/metrics", get(|| async { "verge_up 1\n" }));
    let addr = endpoint.local_addr();
    let health = endpoint.health();
    let stop = CancellationToken::new();
    let server = tokio::spawn(endpoint.serve(stop.clone()));

    let mut c = client(addr).await;
    assert_eq!(check(&mut c, "").await, ServingStatus::NotServing);
    assert_eq!(
        check(&mut c, LIVENESS_SERVICE).await,
        ServingStatus::Serving
    );
    assert_eq!(http_get(addr, "/readyz").await.0, 503);
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    let unknown = c
        .check(HealthCheckRequest {
            service: "nope".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    health.set_ready(true).await;
    assert!(health.is_ready());
    assert_eq!(check(&mut c, "").await, ServingStatus::Serving);
    assert_eq!(http_get(addr, "/readyz").await, (200, "ok\n".to_owned()));
    assert_eq!(http_get(addr, "/metrics").await.1, "verge_up 1\n");

    health.set_ready(false).await;
    assert_eq!(check(&mut c, "").await, ServingStatus::NotServing);
    drop(c);
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn readiness_drops_on_sigterm_before_the_component_drains() {
    // A SIGTERM listener from the start: the signal never takes its default action (exit)
    // in this process, even before `serve` listens.
    let _term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    let endpoint = HealthEndpoint::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = endpoint.local_addr();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve_with_health(
        "test",
        Duration::from_secs(10),
        endpoint,
        |shutdown, health| async move {
            health.set_ready(true).await;
            shutdown.cancelled().await;
            // Draining: the test checks the statuses now, then lets it finish.
            let _ = drained_rx.await;
            Ok::<(), std::io::Error>(())
        },
    ));

    let mut c = client(addr).await;
    let mut watch = c
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut status = ServingStatus::try_from(watch.message().await.unwrap().unwrap().status);
    while status != Ok(ServingStatus::Serving) {
        status = ServingStatus::try_from(watch.message().await.unwrap().unwrap().status);
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let next = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        ServingStatus::try_from(next.status),
        Ok(ServingStatus::NotServing)
    );
    // Still draining: not ready, yet alive.
    assert_eq!(check(&mut c, "").await, ServingStatus::NotServing);
    assert_eq!(
        check(&mut c, LIVENESS_SERVICE).await,
        ServingStatus::Serving
    );
    assert_eq!(http_get(addr, "/readyz").await.0, 503);
    drained_tx.send(()).unwrap();
    let outcome = served.await.unwrap();
    assert_eq!(outcome, Outcome::Drained(Signal::Terminate));
    // The endpoint is gone with the component, even with a watch still open.
    let mut closed = false;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "the health endpoint still accepts connections");
}
