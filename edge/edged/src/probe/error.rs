//! [`ProbeError`]: why one probe attempt failed. Its message is the probe's output as the
//! kubelet reports it (`<Kind> probe failed: <message>` in the `Unhealthy` event).

use std::time::Duration;

use verge_container_runtime::RuntimeError;
use verge_runtime::ErrorChain;

/// Why a probe attempt failed (kubelet: `probe.Failure` with its output, or an error of the
/// prober itself, which counts as a failure).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// An `exec` probe without a command.
    #[error("exec probe has no command")]
    NoCommand,
    /// The runtime could not run the command.
    #[error("cannot {}: {}", .0.op(), .0.engine())]
    Exec(#[source] RuntimeError),
    /// The command exited non-zero; `output` is its (capped) output.
    #[error("command {command:?} exited with {code}: {output}")]
    Exited {
        /// The command.
        command: Vec<String>,
        /// Its exit code.
        code: i64,
        /// Its stdout and stderr, trimmed.
        output: String,
    },
    /// The runtime reported no exit code.
    #[error("exec finished without an exit code")]
    NoExitCode,
    /// `httpGet.scheme` is neither HTTP nor HTTPS.
    #[error("unsupported scheme {0:?} (HTTP or HTTPS)")]
    Scheme(String),
    /// `httpGet.protocol` is not HTTP1 (the alpha HTTP2 is not implemented).
    #[error("httpGet protocol {0:?} is not supported (only HTTP1)")]
    HttpProtocol(String),
    /// `grpc.mode` is not Plaintext (the alpha TLS mode is not implemented).
    #[error("gRPC probe mode {0:?} is not supported (only Plaintext)")]
    GrpcMode(String),
    /// No `host` and the pod has no IP.
    #[error("no host for the probe: the pod has no IP yet")]
    NoHost,
    /// A named port that the container does not declare (kubelet: `findPortByName`).
    #[error("couldn't find port {0:?} in the container's ports")]
    PortName(String),
    /// A port outside 1–65535.
    #[error("invalid port number: {0}")]
    PortNumber(i32),
    /// The URL built from host, port and path does not parse.
    #[error("invalid probe URL: {0}")]
    Url(#[source] hyper::http::uri::InvalidUri),
    /// A probe header with an invalid name or value.
    #[error("invalid HTTP header {0:?}")]
    Header(String),
    /// The request could not be built.
    #[error("invalid HTTP request to {url}: {source}")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: hyper::http::Error,
    },
    /// More redirects than the kubelet follows.
    #[error("Get: stopped after {0} redirects")]
    Redirects(usize),
    /// The server answered outside 200–399.
    #[error("HTTP probe failed with statuscode: {0}")]
    Status(u16),
    /// The HTTP request failed (connection, TLS, protocol).
    #[error("Get \"{url}\": {}", ErrorChain(.source))]
    Get {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// The TCP connection failed.
    #[error("dial tcp {addr}: {source}")]
    Dial {
        /// `host:port`.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC address does not make an endpoint.
    #[error("error: invalid gRPC address {addr:?}: {}", ErrorChain(.source))]
    GrpcAddress {
        /// `host:port`.
        addr: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The gRPC connection failed.
    #[error("error: failed to connect service at {addr:?}: {}", ErrorChain(.source))]
    GrpcConnect {
        /// `host:port`.
        addr: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The gRPC connection did not complete in time.
    #[error("timeout: failed to connect service {addr:?} within {timeout:?}")]
    GrpcConnectTimeout {
        /// `host:port`.
        addr: String,
        /// The probe's timeout.
        timeout: Duration,
    },
    /// The server does not implement `grpc.health.v1.Health`.
    #[error(
        "error: this server does not implement the grpc health protocol \
         (grpc.health.v1.Health): {}",
        .0.message()
    )]
    GrpcUnimplemented(#[source] Box<tonic::Status>),
    /// The `Check` call failed.
    #[error("{}", grpc_failure(.0))]
    GrpcCall(#[source] Box<tonic::Status>),
    /// The `Check` call did not complete in time.
    #[error("timeout: health rpc did not complete within {0:?}")]
    GrpcTimeout(Duration),
    /// The service answered another status than `SERVING` (its name, quoted).
    #[error("service unhealthy (responded with {0})")]
    Unhealthy(String),
    /// The probe has no handler.
    #[error("probe has no handler (exec, httpGet, tcpSocket or grpc)")]
    NoHandler,
}

/// The kubelet's message of a failed `Check` call: code, description and causes.
fn grpc_failure(status: &tonic::Status) -> String {
    let mut message = format!(
        "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
        status.code(),
        status.message()
    );
    if let Some(source) = std::error::Error::source(status) {
        message.push_str(&format!(": {}", ErrorChain(source)));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_kubelets() {
        let status = ProbeError::Status(500).to_string();
        assert_eq!(status, "HTTP probe failed with statuscode: 500");
        let port = ProbeError::PortName("http".into()).to_string();
        assert_eq!(port, "couldn't find port \"http\" in the container's ports");
        let exited = ProbeError::Exited {
            command: vec!["sh".into()],
            code: 3,
            output: "boom".into(),
        };
        assert_eq!(exited.to_string(), "command [\"sh\"] exited with 3: boom");
        let unhealthy = ProbeError::Unhealthy("\"NOT_SERVING\"".into()).to_string();
        assert_eq!(
            unhealthy,
            "service unhealthy (responded with \"NOT_SERVING\")"
        );
        let timeout = ProbeError::GrpcTimeout(Duration::from_secs(1)).to_string();
        assert_eq!(timeout, "timeout: health rpc did not complete within 1s");
    }
}
