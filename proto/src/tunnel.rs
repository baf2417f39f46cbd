//! [`splice`]: one tunnelled TCP connection carried as `EdgeHub.Tunnel` frames, the same on
//! both ends (cloudhub's CONNECT side and edgecore's kubelet-endpoint side).

use futures::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tonic::Status;

use crate::hub::{TunnelFrame, tunnel_frame};

/// Largest `data` frame written, in bytes (well under any `max_frame_bytes`).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Capacity of a tunnel's outbound frame channel.
const OUTBOUND_FRAMES: usize = 16;

/// The outbound side of a new tunnel whose first frame is `first` (an `open` naming the
/// tunnel cloudhub asked for, or a `dial`): the sender [`splice`] writes to, and the stream to
/// give the RPC (`EdgeHub.Tunnel` or `EdgeHub.Dial`), `first` already in it.
pub fn outbound(
    first: TunnelFrame,
) -> (
    mpsc::Sender<TunnelFrame>,
    tokio_stream::wrappers::ReceiverStream<TunnelFrame>,
) {
    let (frames, rx) = mpsc::channel(OUTBOUND_FRAMES);
    // The channel is new and has room: the first frame always fits.
    let _ = frames.try_send(first);
    (frames, tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// How a [`splice`] ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Spliced {
    /// Bytes read from `io` and sent as frames.
    pub sent: u64,
    /// Bytes received as frames and written to `io`.
    pub received: u64,
}

/// Copies between `io` and a tunnel until both directions ended: what `io` yields goes out
/// as `data` frames through `outbound` (dropped at `io`'s end of file, which ends that
/// direction of the gRPC stream), and the `data` frames that `next` yields are written to
/// `io` (shut down for writing when the frames end). `inbound` is the peer's stream after
/// its first frame. An `open` frame after the first, a failed stream or a failed write ends
/// both directions.
///
/// # Errors
/// The peer's stream failed, or `io` failed; the other direction is abandoned.
pub async fn splice<IO, S>(
    io: IO,
    mut inbound: S,
    outbound: mpsc::Sender<TunnelFrame>,
) -> Result<Spliced, std::io::Error>
where
    IO: AsyncRead + AsyncWrite + Send,
    S: Stream<Item = Result<TunnelFrame, Status>> + Unpin + Send,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let upstream = async move {
        let mut sent = 0u64;
        let mut buffer = vec![0u8; CHUNK_BYTES];
        loop {
            let n = reader.read(&mut buffer).await?;
            if n == 0 {
                return Ok::<u64, std::io::Error>(sent);
            }
            sent += n as u64;
            let frame = TunnelFrame {
                frame: Some(tunnel_frame::Frame::Data(buffer[..n].to_vec())),
            };
            if outbound.send(frame).await.is_err() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the tunnel's stream ended",
                ));
            }
        }
    };
    let downstream = async move {
        let mut received = 0u64;
        loop {
            match inbound.next().await.transpose() {
                Ok(Some(TunnelFrame {
                    frame: Some(tunnel_frame::Frame::Data(bytes)),
                })) => {
                    received += bytes.len() as u64;
                    writer.write_all(&bytes).await?;
                }
                Ok(Some(_)) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a tunnel frame other than data after the first",
                    ));
                }
                Ok(None) => {
                    writer.shutdown().await?;
                    return Ok::<u64, std::io::Error>(received);
                }
                Err(status) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        status.message().to_owned(),
                    ));
                }
            }
        }
    };
    let (sent, received) = tokio::try_join!(upstream, downstream)?;
    Ok(Spliced { sent, received })
}
