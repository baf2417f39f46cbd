//! The kubelet's `/exec`, `/attach` and `/portForward` endpoints as axum handlers: each
//! validates the request, answers `101 Switching Protocols` (SPDY/3.1) and serves the
//! session on the upgraded connection in a task of its own.
//!
//! The connection must be served with upgrades enabled (`axum::serve` does; with hyper's
//! `server::conn::http1::Builder`, call `serve_connection(..).with_upgrades()`), over
//! HTTP/1.1: the upgrade is taken with `hyper::upgrade::on`, and bytes the client sent after
//! its request head reach the session.

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts as _, Request};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use hyper_util::rt::TokioIo;
use tracing::{Instrument, Span, debug};

use super::remotecommand::{self, Kind, Options, Protocol};
use super::upgrade::{negotiate, plain_error, switching_protocols};
use super::{portforward, upgrade};
use verge_container_runtime::StreamingRuntime;

/// `/exec/{namespace}/{pod}[/{uid}]/{container}?command=...&input=1&output=1&error=1&tty=1`:
/// runs the command in container `container_id` of `runtime` (`kubectl exec`); a runtime
/// failure (e.g. no such container) ends the session with the status
/// `error executing command in container: <runtime error>`.
///
/// Answers 400 with the kubelet's text for a query without streams or a request that is not
/// an upgrade to SPDY/3.1 with `X-Stream-Protocol-Version`, 403 (with
/// `X-Accepted-Stream-Protocol-Versions`) if no offered protocol is served
/// (`v5`/`v4`/`v3`/`v2.channel.k8s.io`), else 101. The session ends with the v4 status
/// (`Success`, `NonZeroExitCode` with an `ExitCode` cause, or `InternalError`).
///
/// A WebSocket upgrade (`Upgrade: websocket`) is served over WebSocket instead
/// ([`remotecommand::websocket`]): 403 if the client offers only subprotocols not served.
pub async fn exec<R: StreamingRuntime>(req: Request, runtime: R, container_id: String) -> Response {
    remote_command(req, runtime, container_id, Kind::Exec).await
}

/// `/attach/{namespace}/{pod}[/{uid}]/{container}?input=1&output=1&error=1&tty=1`: attaches
/// to the main process of container `container_id` of `runtime`. Answers as [`exec`] does.
pub async fn attach<R: StreamingRuntime>(
    req: Request,
    runtime: R,
    container_id: String,
) -> Response {
    remote_command(req, runtime, container_id, Kind::Attach).await
}

/// `/portForward/{namespace}/{pod}[/{uid}]`: forwards the client's connections to
/// `127.0.0.1:<port>` in the network namespace of process `sandbox_pid` (the pod sandbox).
/// Answers 400/403 as [`exec`] does for protocol `portforward.k8s.io`, else 101.
pub async fn port_forward(mut req: Request, sandbox_pid: u32) -> Response {
    let protocol = match negotiate(req.headers(), &[portforward::PROTOCOL]) {
        Ok(protocol) => protocol,
        Err(error) => return error.into_response(),
    };
    let path = PodPath::parse(req.uri().path());
    let target = portforward::Target {
        sandbox_pid,
        pod: format!("{}_{}", path.pod, path.namespace),
        uid: path.uid.clone().unwrap_or_default(),
    };
    let span = verge_telemetry::span!(
        "streaming.port_forward",
        k8s.namespace.name = %path.namespace,
        k8s.pod.name = %path.pod,
    );
    let on_upgrade = hyper::upgrade::on(&mut req);
    spawn_upgraded(on_upgrade, span, move |io| portforward::serve(io, target));
    switching_protocols(protocol)
}

async fn remote_command<R: StreamingRuntime>(
    mut req: Request,
    runtime: R,
    container: String,
    kind: Kind,
) -> Response {
    let options = match Options::from_query(req.uri().query().unwrap_or("")) {
        Ok(options) => options,
        Err(error) => return plain_error(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    if remotecommand::websocket::requested(req.headers()) {
        return remote_command_websocket(req, runtime, container, kind, options).await;
    }
    let name = match negotiate(req.headers(), remotecommand::protocol::SUPPORTED) {
        Ok(name) => name,
        Err(error) => return error.into_response(),
    };
    let Some(protocol) = Protocol::from_name(name) else {
        return upgrade::UpgradeError::MissingUpgradeHeaders.into_response();
    };
    let span = remote_command_span(req.uri().path(), kind, &container, name);
    let on_upgrade = hyper::upgrade::on(&mut req);
    spawn_upgraded(on_upgrade, span, move |io| {
        remotecommand::serve(io, protocol, options, kind, runtime, container)
    });
    switching_protocols(name)
}

/// The WebSocket form of [`remote_command`].
async fn remote_command_websocket<R: StreamingRuntime>(
    req: Request,
    runtime: R,
    container: String,
    kind: Kind,
    options: Options,
) -> Response {
    use remotecommand::websocket;
    let protocol = match websocket::choose(req.headers()) {
        Ok(protocol) => protocol,
        Err(message) => return plain_error(StatusCode::FORBIDDEN, &message),
    };
    let span = remote_command_span(req.uri().path(), kind, &container, protocol.unwrap_or(""));
    let (mut parts, _body) = req.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    upgrade
        .protocols(protocol)
        .max_message_size(websocket::MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| {
            websocket::serve(socket, protocol, options, kind, runtime, container).instrument(span)
        })
}

fn remote_command_span(path: &str, kind: Kind, container: &str, protocol: &str) -> Span {
    let path = PodPath::parse(path);
    match kind {
        Kind::Exec => verge_telemetry::span!(
            "streaming.exec",
            k8s.namespace.name = %path.namespace,
            k8s.pod.name = %path.pod,
            k8s.container.name = %path.container,
            container.id = %container,
            verge.protocol = protocol,
        ),
        Kind::Attach => verge_telemetry::span!(
            "streaming.attach",
            k8s.namespace.name = %path.namespace,
            k8s.pod.name = %path.pod,
            k8s.container.name = %path.container,
            container.id = %container,
            verge.protocol = protocol,
        ),
    }
}

/// Runs `serve` on the connection once hyper hands it over (after the 101 is written).
fn spawn_upgraded<F, Fut>(on_upgrade: hyper::upgrade::OnUpgrade, span: Span, serve: F)
where
    F: FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    verge_runtime::tasks::spawn(
        "upgraded stream",
        async move {
            match on_upgrade.await {
                Ok(upgraded) => serve(TokioIo::new(upgraded)).await,
                Err(error) => debug!(%error, "connection not upgraded"),
            }
        }
        .instrument(span),
    );
}

/// The pod named by a kubelet streaming path: `/<verb>/{namespace}/{pod}[/{uid}][/{container}]`.
#[derive(Debug, Default, PartialEq, Eq)]
struct PodPath {
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: String,
}

impl PodPath {
    fn parse(path: &str) -> Self {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let get = |i: usize| parts.get(i).map(|s| (*s).to_owned()).unwrap_or_default();
        let is_port_forward = parts.first().is_some_and(|verb| *verb == "portForward");
        match (is_port_forward, parts.len()) {
            (true, 4) => Self {
                namespace: get(1),
                pod: get(2),
                uid: Some(get(3)),
                container: String::new(),
            },
            (true, _) => Self {
                namespace: get(1),
                pod: get(2),
                uid: None,
                container: String::new(),
            },
            (false, 5) => Self {
                namespace: get(1),
                pod: get(2),
                uid: Some(get(3)),
                container: get(4),
            },
            (false, _) => Self {
                namespace: get(1),
                pod: get(2),
                uid: None,
                container: get(3),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_pod() {
        let path = PodPath::parse("/exec/default/web/app");
        assert_eq!(
            (
                path.namespace.as_str(),
                path.pod.as_str(),
                path.container.as_str()
            ),
            ("default", "web", "app")
        );
        let path = PodPath::parse("/attach/ns/p/uid-1/c");
        assert_eq!(path.uid.as_deref(), Some("uid-1"));
        assert_eq!(path.container, "c");
        let path = PodPath::parse("/portForward/ns/p/uid-2");
        assert_eq!(
            (path.pod.as_str(), path.uid.as_deref()),
            ("p", Some("uid-2"))
        );
    }
}
