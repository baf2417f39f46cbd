//! `kubectl exec` and `kubectl attach` over SPDY (`channel.k8s.io` protocols v2–v5) and
//! over WebSocket (`channel.k8s.io`, `base64.channel.k8s.io` and their `v4.` forms) on the
//! container runtime ([`StreamingRuntime`](verge_container_runtime::StreamingRuntime)), as the
//! kubelet's streaming server (k8s.io/cri-streaming `remotecommand`) serves them.
//!
//! # Layout
//! - [`options`]: the query (`command`, `input`, `output`, `error`, `tty`).
//! - [`protocol`]: the negotiated protocol version.
//! - [`streams`]: waiting for the client's streams.
//! - [`status`]: the final status on the error stream.
//! - [`resize`]: the resize stream's JSON.
//! - `process`: exec and attach on the runtime, their I/O pumped to the streams.
//! - `serve`: one SPDY session from its first stream to the close.
//! - [`websocket`]: one WebSocket session.

pub mod options;
mod process;
pub mod protocol;
pub mod resize;
mod serve;
pub mod status;
pub mod streams;
pub mod websocket;

pub use options::Options;
pub use protocol::Protocol;
pub use serve::{Kind, serve};

/// Errors of exec and attach.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query asks for no stream (answered with 400).
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    /// The client closed the connection before opening all its streams.
    #[error("the client closed the connection before opening its streams")]
    SessionClosed,
    /// The client did not open all its streams in time.
    #[error("timed out waiting for client to create streams")]
    StreamCreationTimeout,
    /// The expected number of streams arrived, but no error stream.
    #[error("the client opened no error stream")]
    NoErrorStream,
    /// A container runtime call failed (the call and the engine's error are in it).
    #[error(transparent)]
    Runtime(#[from] verge_container_runtime::RuntimeError),
    /// The resize stream holds something other than size objects.
    #[error("malformed resize event")]
    Resize(#[source] serde_json::Error),
    /// A resize object did not end within 4 KiB.
    #[error("resize event longer than 4 KiB")]
    ResizeTooLong,
}
