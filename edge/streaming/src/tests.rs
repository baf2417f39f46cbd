//! The streaming server's handlers against the fake runtime (no Docker): the kubelet paths
//! served by [`router`] on an in-memory connection, as the API server calls them.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio_util::codec::Framed;
use tower::ServiceExt as _;
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;

use super::containers::Containers;
use super::server::router;
use super::spdy::{Frame, Headers, SpdyCodec};
use verge_container_runtime::fake::{ExecScript, FakeRuntime};
use verge_container_runtime::labels::{ContainerLabels, PodRef};
use verge_container_runtime::{ContainerRuntime as _, ContainerSpec};

/// A node with pod `ns/web` (uid `u-1`, containers `app` and `side`) stored, and the fake
/// engine; the temporary directory holds the store.
struct Node {
    runtime: FakeRuntime,
    store: MetaStore,
    _dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("store");
        let pod = serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [{"name": "app"}, {"name": "side"}]},
        });
        let key = ResourceKey::new("ns", ResourceType::Pod, "web");
        store
            .upsert_if_newer(&key, "u-1", "1", pod.to_string().as_bytes())
            .expect("stored");
        let runtime = FakeRuntime::new("node-1");
        runtime.add_image("busybox");
        Self {
            runtime,
            store,
            _dir: dir,
        }
    }

    /// Starts instance `restart` of container `name` of the pod; returns its id.
    async fn start(&self, name: &str, restart: u32) -> String {
        let labels = ContainerLabels {
            pod: PodRef {
                namespace: "ns".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            container: name.into(),
            restart_count: restart,
            sandbox: false,
            pod_ip: None,
        };
        let spec = ContainerSpec {
            image: "busybox".into(),
            labels: labels.to_map(),
            ..ContainerSpec::default()
        };
        let id = self
            .runtime
            .create(&labels.docker_name(), spec)
            .await
            .expect("created");
        self.runtime.start(&id).await.expect("started");
        id
    }

    fn router(&self) -> axum::Router {
        router(Containers::new(self.runtime.clone(), self.store.clone()))
    }

    /// `GET uri`: the status and the body as text.
    async fn get(&self, uri: &str) -> (StatusCode, String) {
        let request = Request::get(uri).body(Body::empty()).expect("request");
        let response = self.router().oneshot(request).await.expect("infallible");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// A client connection to the node's kubelet paths.
    fn connect(&self) -> DuplexStream {
        serve(self.router())
    }
}

/// Serves `router` on an in-memory HTTP/1.1 connection with upgrades (as the tunnel's TLS
/// connection is served); the client end.
fn serve(router: axum::Router) -> DuplexStream {
    let (client, server) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |r: hyper::Request<_>| {
            router.clone().oneshot(r.map(Body::new))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server), service)
            .with_upgrades()
            .await;
    });
    client
}

#[tokio::test]
async fn logs_of_the_current_instance_with_tail_limit_and_previous() {
    let node = Node::new();
    let old = node.start("app", 0).await;
    node.runtime.set_logs(&old, "old 1\nold 2\n");
    node.runtime.exit(&old, 1);
    let current = node.start("app", 1).await;
    node.runtime.set_logs(&current, "one\ntwo\nthree\n");

    let (status, body) = node.get("/containerLogs/ns/web/app").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "one\ntwo\nthree\n")
    );
    let (_, body) = node.get("/containerLogs/ns/web/app?tailLines=2").await;
    assert_eq!(body, "two\nthree\n");
    let (_, body) = node
        .get("/containerLogs/ns/web/app?tailLines=2&limitBytes=5")
        .await;
    assert_eq!(body, "two\nt");
    let (_, body) = node.get("/containerLogs/ns/web/app?previous=true").await;
    assert_eq!(body, "old 1\nold 2\n");

    let (status, body) = node.get("/containerLogs/ns/web/side").await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "container \"side\" in pod \"web\" is waiting to start"
        )
    );
}

#[tokio::test]
async fn a_container_or_pod_not_found_gets_the_kubelets_404() {
    let node = Node::new();
    node.start("app", 0).await;
    let not_in_pod = "container \"nope\" not found in pod \"web\"";
    for uri in [
        "/containerLogs/ns/web/nope",
        "/exec/ns/web/nope?command=true&output=1",
        "/attach/ns/web/nope?output=1",
    ] {
        let (status, body) = node.get(uri).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::NOT_FOUND, not_in_pod),
            "{uri}"
        );
    }
    let (status, body) = node.get("/containerLogs/ns/gone/app").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::NOT_FOUND, "pod \"gone\" does not exist")
    );
    let (status, _) = node
        .get("/exec/ns/web/other-uid/app?command=true&output=1")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a uid that is not the pod's");
}

/// What a SPDY client read from each stream of one exec or attach.
type Received = HashMap<&'static str, Vec<u8>>;

/// Upgrades `io` to SPDY for `path_and_query` (protocol v4), opens `streams` (`stdin` gets
/// `stdin` and its end) and reads every stream until the error stream ends.
async fn spdy_session(
    mut io: DuplexStream,
    path_and_query: &str,
    streams: &[&'static str],
    stdin: &[u8],
) -> Received {
    let head = format!(
        "POST {path_and_query} HTTP/1.1\r\nHost: node-1\r\nConnection: Upgrade\r\n\
         Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
         Content-Length: 0\r\n\r\n"
    );
    io.write_all(head.as_bytes()).await.expect("request");
    let mut response = Vec::new();
    while !response.ends_with(b"\r\n\r\n") {
        response.push(io.read_u8().await.expect("response head"));
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    assert!(response.starts_with("HTTP/1.1 101"), "{response}");
    let mut client = Framed::new(io, SpdyCodec::default());
    let mut ids = HashMap::new();
    for (i, kind) in streams.iter().enumerate() {
        let id = u32::try_from(2 * i + 1).expect("small");
        ids.insert(id, *kind);
        let syn = Frame::SynStream {
            stream_id: id,
            associated_id: 0,
            priority: 0,
            flags: 0,
            headers: Headers(vec![("streamtype".into(), (*kind).into())]),
        };
        client.send(syn).await.expect("syn");
        match client.next().await.expect("frame").expect("decode") {
            Frame::SynReply { stream_id, .. } => assert_eq!(stream_id, id),
            other => panic!("expected the reply to {kind}, got {other:?}"),
        }
        if *kind == "stdin" {
            let data = Frame::Data {
                stream_id: id,
                fin: true,
                data: Bytes::copy_from_slice(stdin),
            };
            client.send(data).await.expect("stdin");
        }
    }
    let mut received = Received::new();
    let read = async {
        while let Some(frame) = client.next().await {
            if let Frame::Data {
                stream_id,
                fin,
                data,
            } = frame.expect("decode")
            {
                let kind = ids.get(&stream_id).copied().unwrap_or("unknown");
                received.entry(kind).or_default().extend_from_slice(&data);
                if fin && kind == "error" {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the session ends within 10 s");
    received
}

fn text(received: &Received, stream: &str) -> String {
    String::from_utf8_lossy(received.get(stream).map_or(&[][..], Vec::as_slice)).into_owned()
}

#[tokio::test]
async fn exec_streams_stdout_and_stderr_and_reports_the_exit_code() {
    let node = Node::new();
    let app = node.start("app", 0).await;
    node.runtime.script_exec(
        "sh -c work",
        ExecScript {
            stdout: b"out\n".to_vec(),
            stderr: b"err\n".to_vec(),
            exit_code: 3,
        },
    );
    let uri = "/exec/ns/web/app?command=sh&command=-c&command=work&output=1&error=1";
    let received = spdy_session(node.connect(), uri, &["error", "stdout", "stderr"], b"").await;
    assert_eq!(text(&received, "stdout"), "out\n");
    assert_eq!(text(&received, "stderr"), "err\n");
    let status = text(&received, "error");
    assert!(
        status.contains(r#""reason":"NonZeroExitCode""#)
            && status.contains(r#"{"reason":"ExitCode","message":"3"}"#)
            && status.contains("error executing command [sh -c work], exit code 3"),
        "{status}"
    );
    assert!(
        node.runtime
            .take_calls()
            .contains(&format!("exec {app} sh -c work"))
    );

    // A success is the v4 Success status; stdin reaches the process and its end closes it.
    let uri = "/exec/ns/web/u-1/app?command=cat&input=1&output=1&error=1";
    let streams = ["error", "stdin", "stdout", "stderr"];
    let received = spdy_session(node.connect(), uri, &streams, b"through stdin\n").await;
    assert_eq!(text(&received, "stdout"), "through stdin\n");
    assert_eq!(text(&received, "error"), r#"{"status":"Success"}"#);
}

#[tokio::test]
async fn exec_in_a_container_the_runtime_does_not_know_fails_with_the_kubelets_status() {
    let node = Node::new();
    let runtime = node.runtime.clone();
    // The handler on a route whose last segment is the container id, as tests/streaming.rs
    // serves it with Docker.
    type Segments = axum::extract::Path<(String, String, String)>;
    let app = axum::Router::new().route(
        "/exec/{namespace}/{pod}/{container}",
        axum::routing::any(move |segments: Segments, request: axum::extract::Request| {
            let axum::extract::Path((_, _, id)) = segments;
            super::exec(request, runtime.clone(), id)
        }),
    );
    let uri = "/exec/ns/web/c-missing?command=true&output=1";
    let received = spdy_session(serve(app), uri, &["error", "stdout"], b"").await;
    let status = text(&received, "error");
    assert!(
        status.contains(r#""reason":"InternalError""#)
            && status.contains(
                "error executing command in container: docker: create exec failed: \
                 No such container"
            ),
        "{status}"
    );
}

#[tokio::test]
async fn attach_plays_the_main_processs_output() {
    let node = Node::new();
    let app = node.start("app", 0).await;
    node.runtime.script_attach(&app, "attached\n");
    let uri = "/attach/ns/web/app?output=1";
    let received = spdy_session(node.connect(), uri, &["error", "stdout"], b"").await;
    assert_eq!(text(&received, "stdout"), "attached\n");
    assert_eq!(text(&received, "error"), r#"{"status":"Success"}"#);
    assert!(node.runtime.take_calls().contains(&format!("attach {app}")));
}
