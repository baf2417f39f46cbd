//! The edge nodes connected to cloudhub replicas, from `HubFrame.session` events: the
//! node -> replica routing table.
//!
//! Each replica sends a `NodeSession` for every node connected when the controller attaches
//! and for every later connect/disconnect. A node belongs to the link (attached replica
//! stream) that last announced it connected: a node that reconnects to replica B while A
//! still reports it is held by B, and A's later disconnect of it is stale. When a link ends,
//! its nodes are gone ([`Sessions::detach`]). The inventory of a session goes to the
//! downstream side ([`crate::dispatch::Input::Connected`]), which diffs it against its watch caches
//! (architecture.md §3.2); it is not kept here.

use std::collections::HashMap;

use verge_proto::hub::NodeSession;

/// One connected node's session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The [`crate::hub::Link::id`] of the replica stream that announced the session.
    pub link: u64,
    /// The name the cloudhub replica announced (for logs).
    pub cloudhub: String,
}

/// What a session event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The node connected (or reconnected, replacing its previous session).
    Connected,
    /// The node disconnected.
    Disconnected,
    /// A disconnect of a session that is not the current one (another link, or unknown).
    Stale,
}

/// The connected nodes, by name.
#[derive(Debug, Default)]
pub struct Sessions {
    nodes: HashMap<String, Session>,
}

impl Sessions {
    /// Applies a session event received on link `link`. A connect always wins (the newest
    /// announcement holds the node); a disconnect received on a link other than the one
    /// holding the node is [`Change::Stale`] and ignored (the node moved replicas).
    pub fn apply(&mut self, link: u64, event: NodeSession) -> Change {
        if event.connected {
            let session = Session {
                link,
                cloudhub: event.cloudhub,
            };
            self.nodes.insert(event.node, session);
            return Change::Connected;
        }
        match self.nodes.get(&event.node) {
            Some(s) if s.link == link => {
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

    /// Link `link` ended: forgets the nodes it held and returns them, sorted. Nodes that
    /// moved to another link stay.
    pub fn detach(&mut self, link: u64) -> Vec<String> {
        let mut gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, s)| s.link == link)
            .map(|(n, _)| n.clone())
            .collect();
        gone.sort();
        for node in &gone {
            self.nodes.remove(node);
        }
        gone
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
        assert_eq!(s.apply(1, event("a", true, "hub-1")), Change::Connected);
        assert_eq!(s.len(), 1);
        assert_eq!(s.apply(2, event("a", true, "hub-2")), Change::Connected);
        assert_eq!(s.apply(1, event("a", false, "hub-1")), Change::Stale);
        assert_eq!(s.get("a").map(|s| s.link), Some(2));
        assert_eq!(s.apply(2, event("a", false, "hub-2")), Change::Disconnected);
        assert!(s.is_empty());
        assert_eq!(s.apply(1, event("b", false, "")), Change::Stale);
    }

    #[test]
    fn replicas_with_the_same_name_are_told_apart_by_link() {
        let mut s = Sessions::default();
        s.apply(1, event("a", true, "cloudhub"));
        assert_eq!(s.apply(2, event("a", false, "cloudhub")), Change::Stale);
        assert_eq!(s.get("a").map(|s| s.link), Some(1));
    }

    #[test]
    fn detach_forgets_only_the_links_nodes() {
        let mut s = Sessions::default();
        s.apply(1, event("a", true, "hub-1"));
        s.apply(1, event("b", true, "hub-1"));
        s.apply(2, event("c", true, "hub-2"));
        // b moved to hub-2 before hub-1's stream ended.
        s.apply(2, event("b", true, "hub-2"));
        assert_eq!(s.detach(1), ["a"]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.get("b").map(|s| s.link), Some(2));
        assert!(s.detach(1).is_empty());
        assert_eq!(s.detach(2), ["b", "c"]);
        assert!(s.is_empty());
    }
}
