//! Running exec and attach on Docker through bollard and pumping their I/O to the streams.

use std::pin::Pin;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, ResizeContainerTTYOptionsBuilder, ResizeExecOptionsBuilder,
};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::Error;
use super::Kind;
use super::options::Options;
use super::resize::{ResizeDecoder, TerminalSize};
use super::status::Outcome;
use super::streams::Streams;

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// Runs `kind` on the container: [`exec`] or [`attach`].
pub async fn run(
    kind: Kind,
    docker: &Docker,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match kind {
        Kind::Exec => exec(docker, container, options, streams).await,
        Kind::Attach => attach(docker, container, options, streams).await,
    }
}

/// Runs `options.command` in the container (`docker exec`) and reports its exit code.
pub async fn exec(
    docker: &Docker,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match try_exec(docker, container, options, streams).await {
        Ok(outcome) => outcome,
        Err(error) => Outcome::Failed(format!(
            "error executing command in container: {}",
            crate::streaming::error::chain(&error)
        )),
    }
}

/// Attaches to the container's main process (`docker attach`).
pub async fn attach(
    docker: &Docker,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match try_attach(docker, container, options, streams).await {
        Ok(()) => Outcome::Success,
        Err(error) => Outcome::Failed(format!(
            "error attaching to container: {}",
            crate::streaming::error::chain(&error)
        )),
    }
}

async fn try_exec(
    docker: &Docker,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Result<Outcome, Error> {
    let config = ExecConfig {
        attach_stdin: Some(options.stdin),
        attach_stdout: Some(options.stdout),
        attach_stderr: Some(options.stderr),
        tty: Some(options.tty),
        cmd: Some(options.command.clone()),
        ..ExecConfig::default()
    };
    let id = docker
        .create_exec(container, config)
        .await
        .map_err(|source| Error::Docker {
            what: "create exec",
            source,
        })?
        .id;
    let start = StartExecOptions {
        detach: false,
        tty: options.tty,
        output_capacity: None,
    };
    let started = docker
        .start_exec(&id, Some(start))
        .await
        .map_err(|source| Error::Docker {
            what: "start exec",
            source,
        })?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(Error::Detached);
    };
    let resize = |size: TerminalSize| {
        let options = ResizeExecOptionsBuilder::new()
            .h(i32::from(size.height))
            .w(i32::from(size.width))
            .build();
        let docker = docker.clone();
        let id = id.clone();
        async move { docker.resize_exec(&id, options).await }
    };
    pump(output, input, true, streams, resize).await?;
    exit_code(docker, &id, options).await
}

/// The exec's exit code; Docker may report the exec running for a moment after its output
/// ended.
async fn exit_code(docker: &Docker, id: &str, options: &Options) -> Result<Outcome, Error> {
    for _ in 0..100 {
        let inspect = docker
            .inspect_exec(id)
            .await
            .map_err(|source| Error::Docker {
                what: "inspect exec",
                source,
            })?;
        if inspect.running != Some(true) {
            return Ok(match inspect.exit_code {
                Some(0) | None => Outcome::Success,
                Some(code) => match u8::try_from(code) {
                    Ok(code) => Outcome::ExitCode {
                        code,
                        command: options.command.clone(),
                    },
                    Err(_) => Outcome::Failed(format!("exit code {code} out of range")),
                },
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Error::StillRunning)
}

async fn try_attach(
    docker: &Docker,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Result<(), Error> {
    let attach = AttachContainerOptionsBuilder::new()
        .stream(true)
        .logs(false)
        .stdin(options.stdin)
        .stdout(options.stdout)
        .stderr(options.stderr)
        .build();
    // As containerd's CRI attach: the client's stdin EOF closes the container's stdin only
    // for `stdinOnce` containers; otherwise the attach goes on (Docker would instead end
    // the output when the attach's stdin is half-closed).
    let stdin_once = docker
        .inspect_container(container, None)
        .await
        .map_err(|source| Error::Docker {
            what: "inspect container",
            source,
        })?
        .config
        .and_then(|config| config.stdin_once)
        .unwrap_or(false);
    let attached = docker
        .attach_container(container, Some(attach))
        .await
        .map_err(|source| Error::Docker {
            what: "attach",
            source,
        })?;
    let resize = |size: TerminalSize| {
        let options = ResizeContainerTTYOptionsBuilder::new()
            .h(i32::from(size.height))
            .w(i32::from(size.width))
            .build();
        let docker = docker.clone();
        let container = container.to_owned();
        async move { docker.resize_container_tty(&container, options).await }
    };
    pump(attached.output, attached.input, stdin_once, streams, resize).await
}

/// Copies stdin in, output out and resize events to Docker until the output ends (the
/// process exited). The client's stdin EOF closes the process's stdin if `close_stdin`.
async fn pump<F, Fut>(
    mut output: Output,
    input: Input,
    close_stdin: bool,
    streams: &mut Streams,
    resize: F,
) -> Result<(), Error>
where
    F: Fn(TerminalSize) -> Fut,
    Fut: Future<Output = Result<(), bollard::errors::Error>>,
{
    let stdin = copy_stdin(streams.stdin.take(), input, close_stdin);
    let resizes = resize_loop(streams.resize.take(), resize);
    let out = async {
        while let Some(item) = output.next().await {
            let item = item.map_err(|source| Error::Docker {
                what: "read output",
                source,
            })?;
            let (target, bytes) = match item {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    (&mut streams.stdout, message)
                }
                LogOutput::StdErr { message } => (&mut streams.stderr, message),
                LogOutput::StdIn { .. } => continue,
            };
            if let Some(writer) = target
                && let Err(error) = writer.write_all(&bytes).await
            {
                debug!(%error, "client stopped reading output");
                *target = None;
            }
        }
        Ok::<_, Error>(())
    };
    tokio::pin!(stdin, resizes, out);
    let (mut stdin_done, mut resizes_done) = (false, false);
    loop {
        tokio::select! {
            result = &mut out => return result,
            () = &mut stdin, if !stdin_done => stdin_done = true,
            () = &mut resizes, if !resizes_done => resizes_done = true,
        }
    }
}

async fn copy_stdin(stdin: Option<impl AsyncRead + Unpin>, mut input: Input, close: bool) {
    let Some(mut stdin) = stdin else {
        std::future::pending::<()>().await;
        return;
    };
    if let Err(error) = tokio::io::copy(&mut stdin, &mut input).await {
        debug!(%error, "stdin copy ended");
    }
    if close {
        // EOF (the client's FIN): close the process's stdin (`cat`, `kubectl cp` end on it).
        let _ = input.shutdown().await;
    } else {
        // Keep Docker's side open until the output ends.
        std::future::pending::<()>().await;
    }
}

async fn resize_loop<F, Fut>(reader: Option<impl AsyncRead + Unpin>, resize: F)
where
    F: Fn(TerminalSize) -> Fut,
    Fut: Future<Output = Result<(), bollard::errors::Error>>,
{
    let Some(mut reader) = reader else { return };
    let mut decoder = ResizeDecoder::default();
    let mut buf = vec![0u8; 1024];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match decoder.push(&buf[..n]) {
            Ok(sizes) => {
                for size in sizes {
                    if let Err(error) = resize(size).await {
                        debug!(%error, ?size, "resize failed");
                    }
                }
            }
            Err(error) => {
                debug!(%error, "bad resize stream");
                return;
            }
        }
    }
}
