//! One probe attempt: the [`ProbeHandler`] trait and its Docker implementation
//! (kubelet: `prober/prober.go` with `probe/exec`, `probe/http`, `probe/tcp`).

use std::future::Future;
use std::net::SocketAddr;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpStream;

use super::{ProbeKind, ProbeTarget};

/// How much exec output is kept for the failure message, in bytes (kubelet: 10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;
/// The `User-Agent` of HTTP probes (kubelet: `kube-probe/<major>.<minor>`).
const USER_AGENT: &str = "kube-probe/1.37";

/// The result of one probe attempt (kubelet: `probe.Success` / `probe.Failure`; errors of the
/// prober itself count as failures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// Whether the attempt succeeded.
    pub success: bool,
    /// Why it failed (empty on success).
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

/// Runs probes for real: `exec` in the container through Docker, `httpGet` over HTTP/1.1
/// (no keep-alive, like the kubelet), `tcpSocket` by connecting. Limits:
/// - `httpGet` with `scheme: HTTPS` fails with "HTTPS probes are not supported" (no TLS
///   client on the edge yet); redirects are not followed (3xx counts as success, as the
///   kubelet does for a redirect to another host).
/// - `grpc` probes fail with "gRPC probes are not supported".
/// - An `exec` that outlives its timeout keeps running in the container (as with the kubelet's
///   dockershim); only the probe result is a failure.
#[derive(Debug, Clone)]
pub struct DockerProber {
    docker: Docker,
    http: Client<HttpConnector, Empty<Bytes>>,
}

impl DockerProber {
    /// A prober using `docker` for `exec` probes.
    pub fn new(docker: Docker) -> Self {
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http();
        Self { docker, http }
    }

    async fn exec(&self, container_id: &str, command: &[String]) -> ProbeOutcome {
        if command.is_empty() {
            return ProbeOutcome::failure("exec probe has no command");
        }
        let options = CreateExecOptions {
            cmd: Some(command.to_vec()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = match self.docker.create_exec(container_id, options).await {
            Ok(exec) => exec,
            Err(e) => return ProbeOutcome::failure(format!("cannot create exec: {e}")),
        };
        let mut output = Vec::new();
        match self.docker.start_exec(&exec.id, None).await {
            Ok(StartExecResults::Attached {
                output: mut stream, ..
            }) => {
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(log) => {
                            let bytes = log.into_bytes();
                            let room = MAX_OUTPUT.saturating_sub(output.len());
                            output.extend_from_slice(&bytes[..bytes.len().min(room)]);
                        }
                        Err(e) => return ProbeOutcome::failure(format!("exec output failed: {e}")),
                    }
                }
            }
            Ok(StartExecResults::Detached) => {}
            Err(e) => return ProbeOutcome::failure(format!("cannot start exec: {e}")),
        }
        match self.docker.inspect_exec(&exec.id).await {
            Ok(inspect) => match inspect.exit_code {
                Some(0) => ProbeOutcome::success(),
                Some(code) => ProbeOutcome::failure(format!(
                    "command {command:?} exited with {code}: {}",
                    String::from_utf8_lossy(&output).trim()
                )),
                None => ProbeOutcome::failure("exec finished without an exit code"),
            },
            Err(e) => ProbeOutcome::failure(format!("cannot inspect exec: {e}")),
        }
    }

    async fn http_get(&self, url: Uri, headers: Vec<(String, String)>) -> ProbeOutcome {
        let mut request = Request::get(&url)
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
                _ => return ProbeOutcome::failure(format!("invalid HTTP header {name:?}")),
            }
        }
        let request = match request.body(Empty::new()) {
            Ok(r) => r,
            Err(e) => return ProbeOutcome::failure(format!("invalid HTTP request to {url}: {e}")),
        };
        match self.http.request(request).await {
            Ok(response) if (200..400).contains(&response.status().as_u16()) => {
                ProbeOutcome::success()
            }
            Ok(response) => ProbeOutcome::failure(format!(
                "HTTP probe failed with statuscode: {}",
                response.status().as_u16()
            )),
            Err(e) => ProbeOutcome::failure(format!("Get \"{url}\": {e}")),
        }
    }
}

impl ProbeHandler for DockerProber {
    async fn run(
        &self,
        _kind: ProbeKind,
        target: &ProbeTarget,
        container: &Container,
        probe: &Probe,
    ) -> ProbeOutcome {
        if let Some(exec) = &probe.exec {
            return self
                .exec(
                    &target.container_id,
                    exec.command.as_deref().unwrap_or_default(),
                )
                .await;
        }
        if let Some(http) = &probe.http_get {
            let scheme = http.scheme.as_deref().unwrap_or("HTTP");
            if !scheme.eq_ignore_ascii_case("HTTP") {
                return ProbeOutcome::failure(format!(
                    "{scheme} probes are not supported (only HTTP)"
                ));
            }
            let (host, port) = match address(target, container, http.host.as_deref(), &http.port) {
                Ok(a) => a,
                Err(message) => return ProbeOutcome::failure(message),
            };
            let path = http.path.as_deref().unwrap_or("/");
            let slash = if path.starts_with('/') { "" } else { "/" };
            let url = match format!("http://{}{slash}{path}", join_host_port(&host, port))
                .parse::<Uri>()
            {
                Ok(url) => url,
                Err(e) => return ProbeOutcome::failure(format!("invalid probe URL: {e}")),
            };
            let headers = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()));
            return self.http_get(url, headers.collect()).await;
        }
        if let Some(tcp) = &probe.tcp_socket {
            let (host, port) = match address(target, container, tcp.host.as_deref(), &tcp.port) {
                Ok(a) => a,
                Err(message) => return ProbeOutcome::failure(message),
            };
            let addr = join_host_port(&host, port);
            return match TcpStream::connect(&addr).await {
                Ok(_) => ProbeOutcome::success(),
                Err(e) => ProbeOutcome::failure(format!("dial tcp {addr}: {e}")),
            };
        }
        if probe.grpc.is_some() {
            return ProbeOutcome::failure("gRPC probes are not supported");
        }
        ProbeOutcome::failure("probe has no handler (exec, httpGet, tcpSocket or grpc)")
    }
}

/// The host (explicit, else the pod IP) and port (a number, or the name of one of the
/// container's ports) of an `httpGet`/`tcpSocket` probe (kubelet: `findPortByName`).
fn address(
    target: &ProbeTarget,
    container: &Container,
    host: Option<&str>,
    port: &IntOrString,
) -> Result<(String, u16), String> {
    let host = match host.filter(|h| !h.is_empty()).or(target.pod_ip.as_deref()) {
        Some(h) => h.to_owned(),
        None => return Err("no host for the probe: the pod has no IP yet".to_owned()),
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
                .ok_or_else(|| format!("couldn't find port {name:?} in the container's ports"))?,
        },
    };
    let port = u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))?;
    Ok((host, port))
}

/// `host:port`, bracketing IPv6 literals.
fn join_host_port(host: &str, port: u16) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{host}:{port}"),
    }
}
