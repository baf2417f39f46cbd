//! Running exec and attach on the container runtime ([`StreamingRuntime`]) and pumping their
//! I/O to the client's streams.

use std::future::Future;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tracing::debug;

use super::Error;
use super::Kind;
use super::options::Options;
use super::resize::{ResizeDecoder, TerminalSize};
use super::status::Outcome;
use super::streams::Streams;
use verge_container_runtime::{
    AttachedProcess, InputWriter, OutputChunk, Result as RuntimeResult, Stdio, StreamingRuntime,
};

/// Runs `kind` on the container: [`exec`] or [`attach`].
pub async fn run<R: StreamingRuntime>(
    kind: Kind,
    runtime: &R,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match kind {
        Kind::Exec => exec(runtime, container, options, streams).await,
        Kind::Attach => attach(runtime, container, options, streams).await,
    }
}

/// Runs `options.command` in the container (`kubectl exec`) and reports its exit code.
pub async fn exec<R: StreamingRuntime>(
    runtime: &R,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match try_exec(runtime, container, options, streams).await {
        Ok(outcome) => outcome,
        Err(error) => Outcome::Failed(format!(
            "error executing command in container: {}",
            crate::error::chain(&error)
        )),
    }
}

/// Attaches to the container's main process (`kubectl attach`).
pub async fn attach<R: StreamingRuntime>(
    runtime: &R,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Outcome {
    match try_attach(runtime, container, options, streams).await {
        Ok(()) => Outcome::Success,
        Err(error) => Outcome::Failed(format!(
            "error attaching to container: {}",
            crate::error::chain(&error)
        )),
    }
}

/// The streams `options` ask for.
fn stdio(options: &Options) -> Stdio {
    Stdio {
        stdin: options.stdin,
        stdout: options.stdout,
        stderr: options.stderr,
        tty: options.tty,
    }
}

async fn try_exec<R: StreamingRuntime>(
    runtime: &R,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Result<Outcome, Error> {
    let session = runtime
        .exec_attached(container, &options.command, stdio(options))
        .await?;
    let id = session.id;
    let resize = |size: TerminalSize| {
        let (runtime, id) = (runtime.clone(), id.clone());
        async move { runtime.resize_exec(&id, size).await }
    };
    pump(session.process, streams, resize).await?;
    let code = runtime.exec_exit_code(&id).await?;
    Ok(match code {
        Some(0) | None => Outcome::Success,
        Some(code) => match u8::try_from(code) {
            Ok(code) => Outcome::ExitCode {
                code,
                command: options.command.clone(),
            },
            Err(_) => Outcome::Failed(format!("exit code {code} out of range")),
        },
    })
}

async fn try_attach<R: StreamingRuntime>(
    runtime: &R,
    container: &str,
    options: &Options,
    streams: &mut Streams,
) -> Result<(), Error> {
    let process = runtime.attach(container, stdio(options)).await?;
    let resize = |size: TerminalSize| {
        let (runtime, container) = (runtime.clone(), container.to_owned());
        async move { runtime.resize_attached(&container, size).await }
    };
    pump(process, streams, resize).await
}

/// Copies stdin in, output out and resize events to the runtime until the output ends (the
/// process exited). The client's stdin EOF closes the process's stdin if the process says so.
async fn pump<F, Fut>(
    process: AttachedProcess,
    streams: &mut Streams,
    resize: F,
) -> Result<(), Error>
where
    F: Fn(TerminalSize) -> Fut,
    Fut: Future<Output = RuntimeResult<()>>,
{
    let AttachedProcess {
        mut output,
        input,
        close_stdin,
    } = process;
    let stdin = copy_stdin(streams.stdin.take(), input, close_stdin);
    let resizes = resize_loop(streams.resize.take(), resize);
    let out = async {
        while let Some(item) = output.next().await {
            let (target, bytes) = match item? {
                OutputChunk::Stdout(bytes) => (&mut streams.stdout, bytes),
                OutputChunk::Stderr(bytes) => (&mut streams.stderr, bytes),
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

async fn copy_stdin(stdin: Option<impl AsyncRead + Unpin>, mut input: InputWriter, close: bool) {
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
        // Keep the process's stdin open until the output ends.
        std::future::pending::<()>().await;
    }
}

async fn resize_loop<F, Fut>(reader: Option<impl AsyncRead + Unpin>, resize: F)
where
    F: Fn(TerminalSize) -> Fut,
    Fut: Future<Output = RuntimeResult<()>>,
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
