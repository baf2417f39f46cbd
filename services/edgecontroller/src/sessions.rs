//! The edge nodes connected to cloudhub, from `HubFrame.session` events.
//!
//! Cloudhub sends a `NodeSession` for every node connected when the controller attaches and
//! for every later connect/disconnect. The inventory kept here is what the resync of the
//! downstream side diffs against its watch caches (DESIGN §3.2).

use std::collections::HashMap;

use verge_proto::Inventory;
use verge_proto::hub::NodeSession;

/// One connected node's session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The cloudhub replica holding the session.
    pub cloudhub: String,
    /// Every object the edge held when it connected.
    pub inventory: Inventory,
}

/// What a session event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The node connected (or reconnected, replacing its previous session).
    Connected,
    /// The node disconnected.
    Disconnected,
    /// A disconnect of a session that is not the current one (another replica, or unknown).
    Stale,
}

/// The connected nodes, by name.
#[derive(Debug, Default)]
pub struct Sessions {
    nodes: HashMap<String, Session>,
}

impl Sessions {
    /// Applies a session event. A disconnect reported by a replica other than the one holding
    /// the current session is [`Change::Stale`] and ignored (the node moved replicas).
    pub fn apply(&mut self, event: NodeSession) -> Change {
        if event.connected {
            let session = Session {
                cloudhub: event.cloudhub,
                inventory: event.inventory.unwrap_or_default(),
            };
            self.nodes.insert(event.node, session);
            return Change::Connected;
        }
        match self.nodes.get(&event.node) {
            Some(s) if event.cloudhub.is_empty() || s.cloudhub == event.cloudhub => {
                self.nodes.remove(&event.node);
                Change::Disconnected
            }
            _ => Change::Stale,
        }
    }

    /// The session of `node`, if connected.
    pub fn get(&self, node: &str) -> Option<&Session> {
        self.nodes.get(node)
    }

    /// Number of connected nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node is connected.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Forgets every session (the hub stream ended; cloudhub re-announces them on re-attach).
    pub fn clear(&mut self) {
        self.nodes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(node: &str, connected: bool, hub: &str) -> NodeSession {
        NodeSession {
            node: node.into(),
            connected,
            inventory: None,
            cloudhub: hub.into(),
        }
    }

    #[test]
    fn connect_disconnect() {
        let mut s = Sessions::default();
        assert_eq!(s.apply(event("a", true, "hub-1")), Change::Connected);
        assert_eq!(s.len(), 1);
        assert_eq!(s.apply(event("a", true, "hub-2")), Change::Connected);
        assert_eq!(s.apply(event("a", false, "hub-1")), Change::Stale);
        assert!(s.get("a").is_some());
        assert_eq!(s.apply(event("a", false, "hub-2")), Change::Disconnected);
        assert!(s.is_empty());
        assert_eq!(s.apply(event("b", false, "")), Change::Stale);
    }
}
