//! Interop of edgecore's streaming handlers (`/exec`, `/portForward`) with client-go's own
//! SPDY client (`edge/tests/spdy-client`, built here with Go: client-go
//! `remotecommand.NewSPDYExecutor` and `tools/portforward`, what kubectl and the API server
//! use toward a kubelet) and with the WebSocket client of Kubernetes' e2e
//! specs, over plain HTTP on 127.0.0.1.
//!
//! The port-forward test into this process's own network namespace needs no Docker; the
//! others run against a busybox container of the local test image.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use axum::Router;
use axum::extract::{Path, Request};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, any};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use verge_edgecore::container_runtime::DockerRuntime;
use verge_edgecore::streaming;
use verge_testkit::docker::{TEST_IMAGE, ensure_docker, ensure_test_image};

/// Builds the Go client once per test process (Go's build cache makes later builds quick).
fn spdy_client() -> Result<PathBuf> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    if let Some(path) = built.as_ref() {
        return Ok(path.clone());
    }
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/spdy-client");
    let binary = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("spdy-client");
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    path.push(":/usr/local/go/bin");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .env("PATH", path)
        .stdin(Stdio::null())
        .status()
        .context("running go build (Go on PATH or in /usr/local/go/bin)")?;
    ensure!(
        status.success(),
        "go build of the SPDY client failed: {status}"
    );
    *built = Some(binary.clone());
    Ok(binary)
}

/// Serves the handlers on 127.0.0.1:0: `/exec/{ns}/{pod}/{container}` execs in Docker
/// container `{container}` through `docker`; `/portForward/{ns}/{pod}` forwards into
/// `sandbox_pid`'s netns.
async fn serve(docker: Option<DockerRuntime>, sandbox_pid: u32) -> Result<SocketAddr> {
    let router = Router::new()
        .route(
            "/exec/{namespace}/{pod}/{container}",
            in_container(docker.clone(), streaming::exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            in_container(docker, streaming::attach),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            any(move |req: Request| streaming::port_forward(req, sandbox_pid)),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}

/// A route whose last path segment is the Docker container `handler` gets.
fn in_container<F, Fut>(docker: Option<DockerRuntime>, handler: F) -> MethodRouter
where
    F: Fn(Request, DockerRuntime, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    any(
        move |Path((_, _, container)): Path<(String, String, String)>, req: Request| {
            let (docker, handler) = (docker.clone(), handler.clone());
            async move {
                match docker {
                    Some(docker) => handler(req, docker, container).await,
                    None => "no docker".into_response(),
                }
            }
        },
    )
}

/// The local Docker engine as the streaming server's runtime.
async fn docker() -> Result<DockerRuntime> {
    Ok(DockerRuntime::connect(None, "verge-streaming-test").await?)
}

/// The client exited with `code` (its stderr shown otherwise).
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs the client with `stdin`, bounded.
async fn client(args: Vec<String>, stdin: Vec<u8>) -> Result<Output> {
    let binary = tokio::task::spawn_blocking(spdy_client).await??;
    let mut child = tokio::process::Command::new(binary)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(&stdin).await?;
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .with_context(|| format!("spdy-client {args:?} did not end within 60 s"))??;
    Ok(output)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A tiny HTTP/1.0 server: answers every connection with `body`.
async fn http_server(body: &'static str) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok(port)
}

#[tokio::test]
async fn port_forward_reaches_a_server_in_the_namespace() -> Result<()> {
    let port = http_server("hello").await?;
    let address = serve(None, std::process::id()).await?;
    let url = format!("http://{address}/portForward/default/pod");
    let args = |remote: u16, requests: u32| {
        vec![
            "portforward".into(),
            "-url".into(),
            url.clone(),
            "-remote".into(),
            remote.to_string(),
            "-requests".into(),
            requests.to_string(),
        ]
    };
    // Eight connections at once: eight stream pairs on one session.
    let output = client(args(port, 8), Vec::new()).await?;
    ensure!(
        output.status.success(),
        "client failed: {}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "200 hello\n".repeat(8));

    // Nothing listens on the port: the error stream carries the kubelet's message.
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let output = client(args(closed, 1), Vec::new()).await?;
    ensure!(
        !output.status.success(),
        "GET through a closed port succeeded"
    );
    let stderr = text(&output.stderr);
    ensure!(
        stderr.contains(&format!(
            "error forwarding port {closed} to pod pod_default"
        )),
        "unexpected stderr: {stderr}"
    );
    Ok(())
}

/// A running busybox container (removed on drop) and its main process's pid.
struct Container {
    id: String,
    pid: u32,
}

impl Container {
    fn start(command: &str) -> Result<Self> {
        Self::start_with(&[], command)
    }

    fn start_with(flags: &[&str], command: &str) -> Result<Self> {
        ensure_docker()?;
        ensure_test_image()?;
        let mut args = vec!["run", "-d", "--rm"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[TEST_IMAGE, "sh", "-c", command]);
        let id = verge_testkit::docker::docker(&args)?;
        let id = id.trim().to_owned();
        let pid = verge_testkit::docker::docker(&["inspect", "-f", "{{.State.Pid}}", &id])?;
        let pid = pid.trim().parse().context("container pid")?;
        if pid == 0 {
            bail!("container {id} is not running");
        }
        Ok(Self { id, pid })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = verge_testkit::docker::docker(&["rm", "-f", &self.id]);
    }
}

async fn exec_url(address: SocketAddr, container: &str, query: &str) -> String {
    format!("http://{address}/exec/default/pod/{container}?{query}")
}

fn exec_args(url: String, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["exec".to_owned(), "-url".to_owned(), url];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[tokio::test]
async fn exec_exit_codes_stdin_tty_and_bulk_output() -> Result<()> {
    let container = Container::start("sleep 600")?;
    let docker = docker().await?;
    let address = serve(Some(docker), container.pid).await?;
    let c = container.id.as_str();

    let url = exec_url(
        address,
        c,
        "command=sh&command=-c&command=exit+3&output=1&error=1",
    )
    .await;
    let output = client(exec_args(url, &[]), Vec::new()).await?;
    assert_exit(&output, 3);

    let url = exec_url(
        address,
        c,
        "command=sh&command=-c&command=echo+out%3B+echo+err+%3E%262&output=1&error=1",
    )
    .await;
    let output = client(exec_args(url, &[]), Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "out\n");
    assert_eq!(text(&output.stderr), "err\n");

    // stdin EOF (DATA+FIN) closes cat's stdin, so cat ends.
    let url = exec_url(address, c, "command=cat&input=1&output=1&error=1").await;
    let output = client(
        exec_args(url, &["-stdin"]),
        b"hello through stdin\n".to_vec(),
    )
    .await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "hello through stdin\n");

    // 10 MiB through stdin (what `kubectl cp` into a pod does), past the stream buffer.
    let url = exec_url(address, c, "command=wc&command=-c&input=1&output=1&error=1").await;
    let output = client(exec_args(url, &["-stdin"]), vec![b'x'; 10 << 20]).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout).trim(), "10485760");

    // TTY: the size sent on the resize stream reaches the terminal.
    let url = exec_url(
        address,
        c,
        "command=sh&command=-c&command=sleep+1%3B+stty+size&output=1&tty=1",
    )
    .await;
    let output = client(exec_args(url, &["-tty", "-size", "100x40"]), Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout).trim(), "40 100");

    // 10 MiB through stdout.
    let url = exec_url(
        address,
        c,
        "command=head&command=-c&command=10485760&command=%2Fdev%2Fzero&output=1&error=1",
    )
    .await;
    let output = client(exec_args(url, &["-count"]), Vec::new()).await?;
    assert_exit(&output, 0);
    let report = text(&output.stdout);
    eprintln!("exec stdout throughput: {report}");
    ensure!(
        report.starts_with("10485760 bytes in "),
        "unexpected: {report}"
    );
    Ok(())
}

#[tokio::test]
async fn port_forward_to_httpd_in_a_container() -> Result<()> {
    let container = Container::start(
        "mkdir -p /www && echo hi from the pod > /www/index.html && httpd -f -p 8080 -h /www",
    )?;
    let address = serve(None, container.pid).await?;
    let url = format!("http://{address}/portForward/default/pod");
    let args = vec![
        "portforward".into(),
        "-url".into(),
        url,
        "-remote".into(),
        "8080".into(),
        "-path".into(),
        "/index.html".into(),
    ];
    // httpd may need a moment to listen.
    let mut last = String::new();
    for _ in 0..20 {
        let output = client(args.clone(), Vec::new()).await?;
        if output.status.success() {
            assert_eq!(text(&output.stdout), "200 hi from the pod\n\n");
            return Ok(());
        }
        last = text(&output.stderr);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("port-forward to httpd failed: {last}")
}

#[tokio::test]
async fn exec_failures_and_long_sessions() -> Result<()> {
    let container = Container::start("sleep 600")?;
    let docker = docker().await?;
    let address = serve(Some(docker), container.pid).await?;

    // Docker refuses: the v4 InternalError status reaches the client as its message.
    let url = exec_url(address, "verge-no-such-container", "command=true&output=1").await;
    let output = client(exec_args(url, &[]), Vec::new()).await?;
    let stderr = text(&output.stderr);
    ensure!(
        stderr.contains("Internal error occurred: error executing command in container"),
        "unexpected stderr: {stderr}"
    );

    // Longer than client-go's 5 s ping period: pings are answered while the process runs.
    let url = exec_url(
        address,
        &container.id,
        "command=sh&command=-c&command=sleep+7%3B+echo+done&output=1&error=1",
    )
    .await;
    let output = client(exec_args(url, &[]), Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "done\n");
    Ok(())
}

#[tokio::test]
async fn attach_sends_stdin_and_ends_with_the_process() -> Result<()> {
    let container = Container::start_with(&["-i"], "read line; echo got $line")?;
    let docker = docker().await?;
    let address = serve(Some(docker), container.pid).await?;
    let url = format!(
        "http://{address}/attach/default/pod/{}?input=1&output=1&error=1",
        container.id
    );
    let output = client(exec_args(url, &["-stdin"]), b"ping\n".to_vec()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "got ping\n");
    Ok(())
}

#[tokio::test]
async fn exec_over_websockets() -> Result<()> {
    let container = Container::start("sleep 600")?;
    let docker = docker().await?;
    let address = serve(Some(docker), container.pid).await?;
    let c = container.id.as_str();
    let wsraw = |url: String| {
        vec![
            "wsraw".to_owned(),
            "-url".to_owned(),
            url,
            "-protocol".to_owned(),
            "channel.k8s.io".to_owned(),
        ]
    };

    // What the node conformance spec does: `channel.k8s.io`, output on channel 1 only, then
    // the close; a success writes no status before v4.
    let url = exec_url(
        address,
        c,
        "command=echo&command=remote+execution+test&output=1&error=1",
    )
    .await;
    let output = client(wsraw(url), Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "remote execution test\n");
    assert_eq!(text(&output.stderr), "");

    // Before v4 a failure's status is its message.
    let url = exec_url(
        address,
        c,
        "command=sh&command=-c&command=echo+err+%3E%262%3B+exit+3&output=1&error=1",
    )
    .await;
    let output = client(wsraw(url), Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(
        text(&output.stderr),
        "err\nstatus: command terminated with non-zero exit code: error executing command \
         [sh -c echo err >&2; exit 3], exit code 3\n"
    );

    // From v4 the status is the JSON status, with the exit code as its cause.
    let url = exec_url(
        address,
        c,
        "command=sh&command=-c&command=echo+out%3B+exit+3&output=1&error=1",
    )
    .await;
    let mut v4 = wsraw(url);
    v4[4] = "v4.channel.k8s.io".to_owned();
    let output = client(v4, Vec::new()).await?;
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "out\n");
    let stderr = text(&output.stderr);
    ensure!(
        stderr.starts_with("status: {\"status\":\"Failure\"")
            && stderr.contains("\"reason\":\"NonZeroExitCode\"")
            && stderr.contains("{\"reason\":\"ExitCode\",\"message\":\"3\"}"),
        "unexpected status: {stderr}"
    );

    // A client offering only protocols this server does not speak (client-go's WebSocket
    // executor asks for `v5.channel.k8s.io`, which only the API server speaks) is refused (403).
    let url = exec_url(address, c, "command=true&output=1").await;
    let mut v5 = wsraw(url);
    v5[4] = "v5.channel.k8s.io".to_owned();
    let output = client(v5, Vec::new()).await?;
    assert_exit(&output, 100);
    ensure!(
        text(&output.stderr).contains("bad status"),
        "unexpected: {}",
        text(&output.stderr)
    );
    Ok(())
}

/// Exec stdout throughput: `VERGE_STREAMING_MB` MiB (default 100) of `/dev/zero` through a
/// session, counted by client-go. Run with
/// `cargo test --release -p verge-edgecore --test streaming exec_stdout_throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; prints MB/s"]
async fn exec_stdout_throughput() -> Result<()> {
    let mib: u64 = std::env::var("VERGE_STREAMING_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let container = Container::start("sleep 600")?;
    let docker = docker().await?;
    let address = serve(Some(docker), container.pid).await?;
    let bytes = mib * 1024 * 1024;
    let query = format!("command=head&command=-c&command={bytes}&command=%2Fdev%2Fzero&output=1");
    let url = exec_url(address, &container.id, &query).await;
    let output = client(exec_args(url, &["-count"]), Vec::new()).await?;
    let report = text(&output.stdout);
    let seconds: f64 = report
        .split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .context("report")?;
    ensure!(
        report.starts_with(&format!("{bytes} bytes")),
        "unexpected: {report}"
    );
    eprintln!(
        "exec stdout: {mib} MiB in {seconds:.3} s = {:.1} MB/s",
        bytes as f64 / 1e6 / seconds
    );
    Ok(())
}
