//! edged's HTTPS and gRPC probes against real servers on 127.0.0.1:0: an HTTPS server with a
//! self-signed rcgen certificate (tokio-rustls + hyper) and a `tonic-health` health service.
//! No Docker engine is needed: `DockerProber` only talks to Docker for `exec` probes.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, GRPCAction, HTTPGetAction, HTTPHeader, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;
use verge_edgecore::container_runtime::DockerRuntime;
use verge_edgecore::edged::probe::{
    DockerProber, ProbeHandler, ProbeKind, ProbeOutcome, ProbeTarget,
};

/// Upper bound of one probe attempt in these tests.
const BOUND: Duration = Duration::from_secs(10);

fn prober() -> Result<DockerProber> {
    // Nothing reaches Docker unless an `exec` probe runs, so the engine's endpoint is one
    // that serves nothing (a local socket would have to exist: bollard checks for it).
    Ok(DockerProber::new(DockerRuntime::with_timeout(
        Some("tcp://127.0.0.1:9"),
        "verge-probes-tls-grpc",
        std::time::Duration::from_secs(5),
    )?))
}

/// Runs `probe` once as a liveness probe of a container in a pod with IP 127.0.0.1.
async fn run(prober: &DockerProber, probe: Probe) -> Result<ProbeOutcome> {
    let target = ProbeTarget {
        namespace: "default".into(),
        pod: "p".into(),
        pod_uid: "uid-probes-tls-grpc".into(),
        container: "app".into(),
        container_id: "not-a-container".into(),
        pod_ip: Some("127.0.0.1".into()),
    };
    let container = Container {
        name: "app".into(),
        ..Container::default()
    };
    let attempt = prober.run(ProbeKind::Liveness, &target, &container, &probe);
    tokio::time::timeout(BOUND, attempt)
        .await
        .context("probe hung")
}

/// `/healthz` → 200, `/fail` → 500, `/host` → 200 iff the probe's `Host` and `X-Probe`
/// headers arrived, anything else → 404.
async fn respond(request: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    let status = match request.uri().path() {
        "/healthz" => StatusCode::OK,
        "/fail" => StatusCode::INTERNAL_SERVER_ERROR,
        "/host" if header("host") == Some("probe.example") && header("x-probe") == Some("1") => {
            StatusCode::OK
        }
        "/host" => StatusCode::BAD_REQUEST,
        _ => StatusCode::NOT_FOUND,
    };
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    Ok(response)
}

/// Starts an HTTPS server on 127.0.0.1:0 whose self-signed certificate names only
/// `localhost` (so neither its issuer nor its name would pass verification).
async fn https_server() -> Result<SocketAddr> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service_fn(respond))
                        .await;
                }
            });
        }
    });
    Ok(addr)
}

fn https_get(port: u16, path: &str, headers: Vec<HTTPHeader>) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            scheme: Some("HTTPS".into()),
            host: Some("127.0.0.1".into()),
            port: IntOrString::Int(i32::from(port)),
            path: Some(path.into()),
            http_headers: Some(headers),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    }
}

#[tokio::test]
async fn https_get_probe_skips_certificate_verification() -> Result<()> {
    verge_telemetry::init_for_tests();
    let prober = prober()?;
    let addr = https_server().await?;

    let ok = run(&prober, https_get(addr.port(), "/healthz", vec![])).await?;
    ensure!(ok.success, "{ok:?}");

    let failed = run(&prober, https_get(addr.port(), "/fail", vec![])).await?;
    ensure!(
        !failed.success && failed.message == "HTTP probe failed with statuscode: 500",
        "{failed:?}"
    );

    // Probe headers replace the defaults, `Host` included, over TLS too.
    let headers = vec![
        HTTPHeader {
            name: "Host".into(),
            value: "probe.example".into(),
        },
        HTTPHeader {
            name: "X-Probe".into(),
            value: "1".into(),
        },
    ];
    let host = run(&prober, https_get(addr.port(), "/host", headers)).await?;
    ensure!(host.success, "{host:?}");

    // The same client still speaks plain HTTP; to a TLS port that is a failure.
    let mut plain = https_get(addr.port(), "/healthz", vec![]);
    if let Some(h) = plain.http_get.as_mut() {
        h.scheme = Some("HTTP".into());
    }
    let plain = run(&prober, plain).await?;
    ensure!(!plain.success, "{plain:?}");

    // h2c (alpha `protocol: HTTP2`) is not implemented: a clear failure, not HTTP/1.1.
    let mut h2c = https_get(addr.port(), "/healthz", vec![]);
    if let Some(h) = h2c.http_get.as_mut() {
        h.protocol = Some("HTTP2".into());
    }
    let h2c = run(&prober, h2c).await?;
    ensure!(
        !h2c.success && h2c.message.contains("not supported"),
        "{h2c:?}"
    );
    Ok(())
}

fn grpc(port: u16, service: Option<&str>) -> Probe {
    Probe {
        grpc: Some(GRPCAction {
            port: i32::from(port),
            service: service.map(str::to_owned),
            ..GRPCAction::default()
        }),
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

#[tokio::test]
async fn grpc_probe_calls_the_health_service() -> Result<()> {
    verge_telemetry::init_for_tests();
    let prober = prober()?;
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("ok", ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("down", ServingStatus::NotServing)
        .await;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    let ok = run(&prober, grpc(port, Some("ok"))).await?;
    ensure!(ok.success, "{ok:?}");
    // No `service`: the server as a whole ("", SERVING by default).
    let whole = run(&prober, grpc(port, None)).await?;
    ensure!(whole.success, "{whole:?}");

    let down = run(&prober, grpc(port, Some("down"))).await?;
    ensure!(
        !down.success && down.message == r#"service unhealthy (responded with "NOT_SERVING")"#,
        "{down:?}"
    );
    let unknown = run(&prober, grpc(port, Some("no-such-service"))).await?;
    ensure!(
        !unknown.success && unknown.message.contains("code = NotFound"),
        "{unknown:?}"
    );
    // TLS (alpha `mode: TLS`) is not implemented: a clear failure, not plaintext.
    let mut tls = grpc(port, Some("ok"));
    if let Some(g) = tls.grpc.as_mut() {
        g.mode = Some("TLS".into());
    }
    let tls = run(&prober, tls).await?;
    ensure!(
        !tls.success && tls.message.contains("not supported"),
        "{tls:?}"
    );
    server.abort();

    // A closed port: the connection fails.
    let closed = TcpListener::bind("127.0.0.1:0").await?;
    let closed_port = closed.local_addr()?.port();
    drop(closed);
    let refused = run(&prober, grpc(closed_port, Some("ok"))).await?;
    ensure!(
        !refused.success && refused.message.contains("failed to connect service"),
        "{refused:?}"
    );
    Ok(())
}
