//! [`CuttableLink`]: a TCP forwarder on loopback between an edge and its cloudhub that a test
//! cuts and heals, for partitions where the edge's other links (its local MQTT broker, its
//! apps) stay up, without network namespaces.
//!
//! A cut behaves like a partition, not like a refusal: bytes stop flowing both ways and new
//! connections are accepted but never answered, so peers notice only through their own
//! timeouts (keepalives). A heal closes what was held during the cut (the peers reconnect)
//! and forwards new connections again.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A forwarder from `127.0.0.1:<port>` to a target address; stopped when dropped.
#[derive(Debug)]
pub struct CuttableLink {
    addr: SocketAddr,
    /// Whether the link is cut; every send (even of the same value) ends a period.
    state: Arc<watch::Sender<bool>>,
    task: JoinHandle<()>,
}

impl CuttableLink {
    /// Listens on `127.0.0.1:0` and forwards every connection to `target`.
    ///
    /// # Errors
    /// The listener cannot be bound.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(false);
        let state = Arc::new(state);
        let accept_state = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut changes = accept_state.subscribe();
                let cut = *changes.borrow_and_update();
                tokio::spawn(async move {
                    // Both ends stay open (nothing flows) until the period ends.
                    let mut _outbound = None;
                    if !cut {
                        let Ok(mut outbound) = TcpStream::connect(target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
                            _ = changes.changed() => {}
                        }
                        _outbound = Some(outbound);
                    }
                    let _ = changes.changed().await;
                    drop(inbound);
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding: open connections stall (held, no bytes either way) and new ones
    /// are accepted and held.
    pub fn cut(&self) {
        self.state.send_replace(true);
    }

    /// Ends a cut: the held connections close, new ones are forwarded again.
    pub fn heal(&self) {
        self.state.send_replace(false);
    }
}

impl Drop for CuttableLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
