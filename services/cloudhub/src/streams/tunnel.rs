//! Tunnels requested from nodes ([`PendingTunnels`]): cloudhub asks a node to open one
//! (`CloudFrame.open_tunnel` on its session) and waits for the node's `EdgeHub.Tunnel` call
//! carrying the same id.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};
use tonic::{Status, Streaming};
use verge_proto::hub::TunnelFrame;

/// The two ends of a node's `EdgeHub.Tunnel` call: the frames it sends, and the sender of
/// the frames cloudhub answers with.
pub(crate) struct TunnelEnds {
    /// Frames from the node after its `open` frame.
    pub inbound: Streaming<TunnelFrame>,
    /// Frames to the node (closing it ends the response stream).
    pub outbound: mpsc::Sender<TunnelFrame>,
}

struct Waiting {
    node: String,
    arrive: oneshot::Sender<TunnelEnds>,
}

/// Tunnel ids waiting for their node's call. An id is removed when the call arrives or when
/// the waiter gives up (its [`Expected`] is dropped).
#[derive(Default)]
pub(crate) struct PendingTunnels {
    waiting: Mutex<HashMap<String, Waiting>>,
}

/// A tunnel expected from a node; dropping it forgets the id.
pub(crate) struct Expected<'a> {
    /// The id to send in `OpenTunnel`.
    pub id: String,
    /// Resolves when the node's call arrives.
    pub arrived: oneshot::Receiver<TunnelEnds>,
    pending: &'a PendingTunnels,
}

impl Drop for Expected<'_> {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.id);
    }
}

impl PendingTunnels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Expects a tunnel from `node` under a fresh id.
    pub(crate) fn expect(&self, node: &str) -> Expected<'_> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (arrive, arrived) = oneshot::channel();
        self.lock().insert(
            id.clone(),
            Waiting {
                node: node.to_owned(),
                arrive,
            },
        );
        Expected {
            id,
            arrived,
            pending: self,
        }
    }

    /// Hands the call of `node` for tunnel `id` to its waiter.
    ///
    /// # Errors
    /// `NOT_FOUND` for an id nobody waits for (unknown, or given up), `PERMISSION_DENIED`
    /// for an id requested from another node (the id stays for its node).
    #[allow(clippy::result_large_err)]
    pub(crate) fn arrive(&self, node: &str, id: &str, ends: TunnelEnds) -> Result<(), Status> {
        let mut waiting = self.lock();
        match waiting.get(id) {
            None => return Err(Status::not_found(format!("no tunnel {id} is expected"))),
            Some(w) if w.node != node => {
                return Err(Status::permission_denied(format!(
                    "tunnel {id} was requested from another node than {node}"
                )));
            }
            Some(_) => {}
        }
        let Some(w) = waiting.remove(id) else {
            return Err(Status::not_found(format!("no tunnel {id} is expected")));
        };
        w.arrive
            .send(ends)
            .map_err(|_| Status::not_found(format!("tunnel {id} was given up")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_forgotten_when_its_waiter_gives_up() {
        let pending = PendingTunnels::default();
        let expected = pending.expect("edge-1");
        let id = expected.id.clone();
        assert!(pending.lock().contains_key(&id));
        drop(expected);
        assert!(pending.lock().is_empty());
    }
}
