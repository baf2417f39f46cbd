//! One probe attempt: the [`ProbeHandler`] trait and its Docker implementation
//! (kubelet: `prober/prober.go` with `probe/exec`, `probe/http`, `probe/tcp`, `probe/grpc`).

use std::future::Future;
use std::net::SocketAddr;

use hyper::Uri;
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpStream;

use super::error::ProbeError;
use super::http::HttpClient;
use super::{ProbeKind, ProbeTarget, grpc, http, tls, worker};
use verge_container_runtime::{ContainerRuntime, DockerRuntime};

/// How much exec output is kept for the failure message, in bytes (kubelet: 10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;

/// The result of one probe attempt (kubelet: `probe.Success` / `probe.Failure`; errors of the
/// prober itself count as failures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// Whether the attempt succeeded.
    pub success: bool,
    /// Why it failed; on success empty, or a warning (kubelet: `probe.Warning`, e.g. an
    /// HTTP redirect not followed), which the pod worker records as a `ProbeWarning` event.
    pub message: String,
}

impl ProbeOutcome {
    /// A successful attempt.
    pub fn success() -> Self {
        Self {
            success: true,
            message: String::new(),
        }
    }

    /// A failed attempt with its reason.
    pub fn failure(message: impl Into<String>) -> Self {
        Self {
            success: false,
            message: message.into(),
        }
    }
}

impl From<Result<Option<String>, ProbeError>> for ProbeOutcome {
    /// `Ok(None)` a success, `Ok(Some(warning))` a success with a warning, `Err` a failure.
    fn from(result: Result<Option<String>, ProbeError>) -> Self {
        match result {
            Ok(None) => Self::success(),
            Ok(Some(warning)) => Self {
                success: true,
                message: warning,
            },
            Err(e) => Self::failure(e.to_string()),
        }
    }
}

/// Runs one attempt of a probe. The caller bounds it by the probe's `timeoutSeconds` (by
/// dropping the future), applies thresholds and publishes results, so an implementation only
/// answers "did this one attempt succeed".
pub trait ProbeHandler: Send + Sync + 'static {
    /// Runs `probe` (of kind `kind`, from `container`'s spec) once against `target`.
    fn run(
        &self,
        kind: ProbeKind,
        target: &ProbeTarget,
        container: &Container,
        probe: &Probe,
    ) -> impl Future<Output = ProbeOutcome> + Send;
}

/// Runs probes for real, as the kubelet does:
/// - `exec` in the container through the container runtime (Docker in production);
/// - `httpGet` over HTTP/1.1 (no keep-alive), for `scheme: HTTPS` over TLS without verifying
///   the server's certificate or name (kubelet: `InsecureSkipVerify`), redirects followed to
///   the same host only (`probe::http`); 200–399 is a success;
/// - `tcpSocket` by connecting;
/// - `grpc` with one `grpc.health.v1.Health/Check` over plaintext HTTP/2 to the pod IP:
///   `SERVING` is a success, any other status a failure (`service unhealthy (responded with
///   "NOT_SERVING")`).
///
/// Limits:
/// - The alpha fields of Kubernetes 1.37 are not implemented: `httpGet.protocol: HTTP2` (h2c)
///   and `grpc.mode: TLS` fail with "... is not supported" rather than silently probing over
///   HTTP/1.1 or plaintext.
/// - An `exec` that outlives its timeout keeps running in the container (as with the kubelet's
///   dockershim); only the probe result is a failure.
#[derive(Debug, Clone)]
pub struct DockerProber<R = DockerRuntime> {
    runtime: R,
    /// One client for `http` and `https` URLs.
    http: HttpClient,
}

impl<R: ContainerRuntime> DockerProber<R> {
    /// A prober using `runtime` for `exec` probes.
    pub fn new(runtime: R) -> Self {
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls::insecure_client_config())
            .https_or_http()
            .enable_http1()
            .build();
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Self { runtime, http }
    }

    async fn exec(&self, container_id: &str, command: &[String]) -> Result<(), ProbeError> {
        if command.is_empty() {
            return Err(ProbeError::NoCommand);
        }
        let exec = self
            .runtime
            .exec(container_id, command, MAX_OUTPUT)
            .await
            .map_err(ProbeError::Exec)?;
        match exec.exit_code {
            Some(0) => Ok(()),
            Some(code) => Err(ProbeError::Exited {
                command: command.to_vec(),
                code,
                output: String::from_utf8_lossy(&exec.output).trim().to_owned(),
            }),
            None => Err(ProbeError::NoExitCode),
        }
    }

    /// Runs lifecycle hook `hook` of `container` once against `target` (kubelet:
    /// `handlerRunner.Run`): `sleep` sleeps its seconds; `exec` and `httpGet` run as a probe's
    /// (an `exec` must exit 0, an `httpGet` must answer 200–399); the deprecated
    /// `tcpSocket` or no action at all is an error. Not bounded here: the caller bounds a
    /// `preStop` hook by the grace period.
    ///
    /// # Errors
    /// The hook failed, with the reason a probe would give.
    pub async fn run_hook(
        &self,
        target: &ProbeTarget,
        container: &Container,
        hook: &LifecycleHandler,
    ) -> Result<(), ProbeError> {
        if let Some(sleep) = &hook.sleep {
            let seconds = u64::try_from(sleep.seconds).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
            return Ok(());
        }
        let probe = Probe {
            exec: hook.exec.clone(),
            http_get: hook.http_get.clone(),
            ..Probe::default()
        };
        self.attempt(target, container, &probe).await.map(|_| ())
    }

    /// One attempt of `probe`; see [`ProbeHandler::run`].
    async fn attempt(
        &self,
        target: &ProbeTarget,
        container: &Container,
        probe: &Probe,
    ) -> Result<Option<String>, ProbeError> {
        if let Some(exec) = &probe.exec {
            let command = exec.command.as_deref().unwrap_or_default();
            return self
                .exec(&target.container_id, command)
                .await
                .map(|()| None);
        }
        if let Some(http) = &probe.http_get {
            let scheme = match http.scheme.as_deref().unwrap_or("HTTP") {
                s if s.eq_ignore_ascii_case("HTTP") => "http",
                s if s.eq_ignore_ascii_case("HTTPS") => "https",
                other => return Err(ProbeError::Scheme(other.to_owned())),
            };
            if let Some(protocol) = http
                .protocol
                .as_deref()
                .filter(|p| !p.eq_ignore_ascii_case("HTTP1"))
            {
                return Err(ProbeError::HttpProtocol(protocol.to_owned()));
            }
            let (host, port) = address(target, container, http.host.as_deref(), &http.port)?;
            let path = http.path.as_deref().unwrap_or("/");
            let slash = if path.starts_with('/') { "" } else { "/" };
            let url = format!("{scheme}://{}{slash}{path}", join_host_port(&host, port))
                .parse::<Uri>()
                .map_err(ProbeError::Url)?;
            let headers = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect::<Vec<_>>();
            return http::get(&self.http, url, &headers).await;
        }
        if let Some(tcp) = &probe.tcp_socket {
            let (host, port) = address(target, container, tcp.host.as_deref(), &tcp.port)?;
            let addr = join_host_port(&host, port);
            return match TcpStream::connect(&addr).await {
                Ok(_) => Ok(None),
                Err(source) => Err(ProbeError::Dial { addr, source }),
            };
        }
        if let Some(grpc) = &probe.grpc {
            if let Some(mode) = grpc
                .mode
                .as_deref()
                .filter(|m| !m.eq_ignore_ascii_case("Plaintext"))
            {
                return Err(ProbeError::GrpcMode(mode.to_owned()));
            }
            // No `host`: always the pod IP (kubelet: `p.GRPC.Port` on `status.PodIP`).
            let port = IntOrString::Int(grpc.port);
            let (host, port) = address(target, container, None, &port)?;
            let service = grpc.service.as_deref().unwrap_or_default();
            let timeout = worker::timeout_of(probe);
            return grpc::check(&join_host_port(&host, port), service, timeout)
                .await
                .map(|()| None);
        }
        Err(ProbeError::NoHandler)
    }
}

impl<R: ContainerRuntime> ProbeHandler for DockerProber<R> {
    async fn run(
        &self,
        _kind: ProbeKind,
        target: &ProbeTarget,
        container: &Container,
        probe: &Probe,
    ) -> ProbeOutcome {
        self.attempt(target, container, probe).await.into()
    }
}

/// The host (explicit, else the pod IP) and port (a number, or the name of one of the
/// container's ports) of an `httpGet`/`tcpSocket`/`grpc` probe (kubelet: `findPortByName`).
fn address(
    target: &ProbeTarget,
    container: &Container,
    host: Option<&str>,
    port: &IntOrString,
) -> Result<(String, u16), ProbeError> {
    let host = match host.filter(|h| !h.is_empty()).or(target.pod_ip.as_deref()) {
        Some(h) => h.to_owned(),
        None => return Err(ProbeError::NoHost),
    };
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| ProbeError::PortName(name.clone()))?,
        },
    };
    let port = u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(ProbeError::PortNumber(number))?;
    Ok((host, port))
}

/// `host:port`, bracketing IPv6 literals.
fn join_host_port(host: &str, port: u16) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{host}:{port}"),
    }
}
