//! [`StreamingRuntime`]: what the kubelet streaming server (`kubectl logs`, `exec`, `attach`,
//! `port-forward`, `cp`) needs from the container engine beyond [`ContainerRuntime`] (the
//! role of CRI's `Exec`, `Attach`, `PortForward` and the container log files for the
//! kubelet), with runtime-neutral types: bytes, Tokio writers and
//! [`RuntimeError`](super::RuntimeError).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::io::AsyncWrite;

use super::{ContainerRuntime, Result};

/// A terminal size in character cells (the client's resize events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// Which standard streams of a process a session attaches, and whether it runs on a TTY.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stdio {
    /// Attach stdin (the session writes to [`AttachedProcess::input`]).
    pub stdin: bool,
    /// Attach stdout.
    pub stdout: bool,
    /// Attach stderr (with a TTY the terminal merges it into stdout).
    pub stderr: bool,
    /// Allocate a terminal (exec; for attach the container's own setting applies).
    pub tty: bool,
}

/// A chunk of a process's output, by the stream it was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Written to stdout (or to the terminal).
    Stdout(Bytes),
    /// Written to stderr.
    Stderr(Bytes),
}

/// A process's output, in the order written; ends when the process (or the attach) ends.
/// An item is an error when reading from the engine failed.
pub type OutputStream = BoxStream<'static, Result<OutputChunk>>;

/// The writing end of a process's stdin. Shutting it down closes the process's stdin.
pub type InputWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// The standard streams of an attached process (an exec or a container's main process).
pub struct AttachedProcess {
    /// Its output; ends when the process ended.
    pub output: OutputStream,
    /// Its stdin (accepts and drops bytes when stdin is not attached).
    pub input: InputWriter,
    /// Whether the client's end of stdin should close the process's stdin: always for an
    /// exec; for an attach only when the container is `stdinOnce` (containerd's CRI attach:
    /// otherwise the attach goes on after the client's stdin ended).
    pub close_stdin: bool,
}

impl std::fmt::Debug for AttachedProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachedProcess")
            .field("close_stdin", &self.close_stdin)
            .finish_non_exhaustive()
    }
}

/// A command started in a container with its standard streams attached.
#[derive(Debug)]
pub struct ExecSession {
    /// The engine's id of the exec, for [`StreamingRuntime::resize_exec`] and
    /// [`StreamingRuntime::exec_exit_code`].
    pub id: String,
    /// Its streams.
    pub process: AttachedProcess,
}

/// Which part of a container's output [`StreamingRuntime::container_logs`] returns (the
/// kubelet's `PodLogOptions` less `previous`, which picks the container instance, and
/// `limitBytes`, which the server applies to whatever the runtime returns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep streaming new output until the container stops or the stream is dropped.
    pub follow: bool,
    /// Prefix each line with the time it was written: RFC 3339 in UTC with exactly nine
    /// fractional digits, then a space (the kubelet's fixed-width format).
    pub timestamps: bool,
    /// Unix seconds; lines written before are skipped (0: none).
    pub since: i64,
    /// Only the last this many lines (`None`: all).
    pub tail_lines: Option<u64>,
}

/// A container's output as logged, stdout and stderr interleaved as written, in chunks of
/// whole lines. An item is an error when reading the log failed (the stream ends after it).
pub type LogStream = BoxStream<'static, Result<Bytes>>;

/// The container engine as the kubelet streaming server uses it, beside
/// [`ContainerRuntime`] (whose [`list`](ContainerRuntime::list) finds a pod's containers by
/// their labels). Every method fails with [`NotFound`](super::RuntimeError::NotFound) for a
/// container (or exec) that does not exist, and [`Engine`](super::RuntimeError::Engine) when
/// the engine fails.
pub trait StreamingRuntime: ContainerRuntime {
    /// This runtime readied for serving streams, before the first request; never fails (a
    /// runtime that cannot ready itself logs why and serves as it is). Docker: agrees on the
    /// API version with the engine. By default, itself.
    fn prepared(self) -> impl Future<Output = Self> + Send {
        async move { self }
    }

    /// The output of container `id` as `options` select it (`kubectl logs`).
    fn container_logs(
        &self,
        id: &str,
        options: LogOptions,
    ) -> impl Future<Output = Result<LogStream>> + Send;

    /// Starts `command` (argv, not empty) in running container `id` with the standard
    /// streams of `stdio` attached (`kubectl exec`, and `kubectl cp`, which runs `tar`).
    fn exec_attached(
        &self,
        id: &str,
        command: &[String],
        stdio: Stdio,
    ) -> impl Future<Output = Result<ExecSession>> + Send;

    /// Resizes the terminal of exec `exec_id` (an [`ExecSession::id`]).
    fn resize_exec(
        &self,
        exec_id: &str,
        size: TerminalSize,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The exit code of exec `exec_id` once its output ended (`None` if the engine reports
    /// none); waits briefly for an engine that still reports it running.
    ///
    /// # Errors
    /// [`Engine`](super::RuntimeError::Engine) if it still runs after that wait.
    fn exec_exit_code(&self, exec_id: &str) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Attaches to the main process of running container `id` (`kubectl attach`).
    fn attach(
        &self,
        id: &str,
        stdio: Stdio,
    ) -> impl Future<Output = Result<AttachedProcess>> + Send;

    /// Resizes the terminal of container `id`'s main process.
    fn resize_attached(
        &self,
        id: &str,
        size: TerminalSize,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The host process id of container `id`'s main process (whose network namespace
    /// `kubectl port-forward` connects from, for the pod sandbox); `None` when it does not
    /// run.
    fn process_id(&self, id: &str) -> impl Future<Output = Result<Option<u32>>> + Send;
}
