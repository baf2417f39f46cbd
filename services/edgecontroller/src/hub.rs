//! The `ControllerHub.Attach` client stream to cloudhub, re-attached with jittered exponential
//! backoff whenever it ends (like edgehub's reconnect, DESIGN §1).

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tracing::{info, warn};
use verge_core::Group;
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::{ControllerFrame, ControllerHello, controller_frame};

use crate::dispatch::Dispatcher;
use crate::{Config, Error, Result};

/// Largest frame accepted from cloudhub, in bytes: cloudhub's default `max_frame_bytes`
/// (4 MiB) plus room for the `Routed` wrapper.
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// Frames buffered per stream between the shared outbound queue and gRPC.
const STREAM_BUFFER: usize = 16;

/// The endpoint of `config.cloudhub`, with connect timeout and HTTP/2 keepalive.
///
/// # Errors
/// [`Error::Endpoint`] when the address is not a valid URI.
pub fn endpoint(config: &Config) -> Result<Endpoint> {
    let endpoint =
        Endpoint::from_shared(config.cloudhub.clone()).map_err(|source| Error::Endpoint {
            address: config.cloudhub.clone(),
            source,
        })?;
    Ok(endpoint
        .connect_timeout(config.connect_timeout)
        .http2_keep_alive_interval(config.keepalive_interval)
        .keep_alive_timeout(config.keepalive_interval)
        .keep_alive_while_idle(true))
}

/// The first frame of every stream: `ControllerHello{name, groups: ["resource"]}`.
pub fn hello(name: &str) -> ControllerFrame {
    ControllerFrame {
        frame: Some(controller_frame::Frame::Hello(ControllerHello {
            name: name.to_owned(),
            groups: vec![Group::Resource.as_str().to_owned()],
        })),
    }
}

/// Keeps a stream attached until `shutdown`: frames from cloudhub go to `dispatcher`, frames
/// from `outbound` go to cloudhub. Frames taken from `outbound` while a stream breaks are
/// lost; the edge retries what was not acknowledged.
///
/// # Errors
/// [`Error::Endpoint`] for an invalid cloudhub address; stream failures are logged and retried.
pub async fn run(
    config: &Config,
    outbound: &mut mpsc::Receiver<ControllerFrame>,
    dispatcher: &mut Dispatcher,
    shutdown: &CancellationToken,
) -> Result<()> {
    let endpoint = endpoint(config)?;
    let builder = backoff(config);
    let mut backoff = builder.build();
    loop {
        let mut attached = false;
        let outcome = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            r = attach(&endpoint, config, outbound, dispatcher, &mut attached) => r,
        };
        if attached {
            backoff = builder.build();
        }
        let delay = backoff.next().unwrap_or(config.reconnect_max_backoff);
        match outcome {
            Ok(()) => warn!(cloudhub = %config.cloudhub, ?delay, "cloudhub ended the stream"),
            Err(error) => {
                warn!(error = %error.reason(), cloudhub = %config.cloudhub, ?delay,
                    "cloudhub stream failed");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One stream: connect, send the hello, then pump frames both ways until it ends.
async fn attach(
    endpoint: &Endpoint,
    config: &Config,
    outbound: &mut mpsc::Receiver<ControllerFrame>,
    dispatcher: &mut Dispatcher,
    attached: &mut bool,
) -> Result<()> {
    let channel = endpoint.connect().await.map_err(Error::Connect)?;
    let mut client = ControllerHubClient::new(channel)
        .max_decoding_message_size(MAX_FRAME_BYTES)
        .max_encoding_message_size(MAX_FRAME_BYTES);
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    // Cannot fail: the channel is empty and its receiver alive.
    let _ = tx.try_send(hello(&config.name));
    let mut inbound = client
        .attach(ReceiverStream::new(rx))
        .await
        .map_err(Error::Attach)?
        .into_inner();
    *attached = true;
    dispatcher.attached();
    info!(cloudhub = %config.cloudhub, "attached to cloudhub");
    loop {
        tokio::select! {
            frame = inbound.message() => match frame.map_err(Error::Attach)? {
                Some(frame) => dispatcher.on_frame(frame),
                None => return Ok(()),
            },
            Some(frame) = outbound.recv() => {
                if tx.send(frame).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// Re-attach delays: from `reconnect_min_backoff`, doubling, capped at
/// `reconnect_max_backoff`, with full jitter added, never giving up.
fn backoff(config: &Config) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(config.reconnect_min_backoff)
        .with_max_delay(config.reconnect_max_backoff)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let config = Config::default();
        let d = backoff(&config).build().next().expect("unbounded retries");
        assert!(
            d >= config.reconnect_min_backoff && d <= config.reconnect_min_backoff * 2,
            "{d:?}"
        );
    }

    #[test]
    fn bad_address_is_an_error() {
        let config = Config {
            cloudhub: "not a uri".into(),
            ..Config::default()
        };
        assert!(matches!(endpoint(&config), Err(Error::Endpoint { .. })));
    }
}
