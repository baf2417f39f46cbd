//! One exec or attach session on an upgraded connection: streams, the process, the status,
//! and the close as the newest kubelet does it (FIN stdout, stderr and error after the
//! status, reset stdin and resize, then wait for the client to close the connection).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info};

use super::options::Options;
use super::protocol::Protocol;
use super::status::Outcome;
use super::streams::{STREAM_CREATION_TIMEOUT, Streams, wait_for_streams};
use crate::spdy::{Session, SessionConfig, SessionHandle};
use verge_container_runtime::StreamingRuntime;

/// How long to wait for the client to close the connection after the status, before
/// closing it from this side. client-go closes as soon as it read the error stream to EOF.
pub const CLOSE_WAIT: Duration = Duration::from_secs(60);

/// Which operation a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An exec of the query's command (`kubectl exec`).
    Exec,
    /// An attach to the container's main process (`kubectl attach`).
    Attach,
}

/// Serves one session on `io` (after the `101`) until the client closed it, running the
/// process in container `container` of `runtime`.
pub async fn serve<T, R>(
    io: T,
    protocol: Protocol,
    options: Options,
    kind: Kind,
    runtime: R,
    container: String,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    R: StreamingRuntime,
{
    let mut session = Session::new(io, SessionConfig::default());
    let handle = session.handle();
    let mut streams =
        match wait_for_streams(&mut session, &options, protocol, STREAM_CREATION_TIMEOUT).await {
            Ok(streams) => streams,
            Err(error) => {
                info!(%error, "streaming session ended before it started");
                return;
            }
        };
    // Streams opened later are answered (and reset), as the kubelet's handler does.
    let late = verge_runtime::tasks::spawn("late streams", async move {
        while let Some(stream) = session.next_stream().await {
            drop(stream.accept());
        }
    });
    let run = super::process::run(kind, &runtime, &container, &options, &mut streams);
    let outcome = tokio::select! {
        outcome = run => Some(outcome),
        () = handle.closed() => None,
    };
    match outcome {
        Some(outcome) => {
            if let Outcome::Failed(message) = &outcome {
                info!(error = %message, "exec/attach failed");
            }
            finish(streams, &outcome, protocol, &handle).await;
        }
        None => debug!("client closed the connection before the process ended"),
    }
    late.abort();
}

async fn finish(
    mut streams: Streams,
    outcome: &Outcome,
    protocol: Protocol,
    handle: &SessionHandle,
) {
    drop(std::mem::take(&mut streams.held));
    send_status(&mut streams, outcome, protocol).await;
    if tokio::time::timeout(CLOSE_WAIT, handle.closed())
        .await
        .is_err()
    {
        debug!("client kept the connection open after the status; closing it");
        handle.close().await;
    }
}

/// Ends stdin and resize, writes the status for `protocol` to the error stream (nothing for
/// a success before v4) and shuts down stdout, stderr and error.
pub(super) async fn send_status(streams: &mut Streams, outcome: &Outcome, protocol: Protocol) {
    drop(streams.stdin.take());
    drop(streams.resize.take());
    let status = outcome.encode(protocol);
    if !status.is_empty()
        && let Err(error) = streams.error.write_all(&status).await
    {
        debug!(%error, "status not sent");
    }
    for writer in [
        streams.stdout.as_mut(),
        streams.stderr.as_mut(),
        Some(&mut streams.error),
    ]
    .into_iter()
    .flatten()
    {
        let _ = writer.shutdown().await;
    }
}
