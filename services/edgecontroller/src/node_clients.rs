//! The API clients edgecontroller acts through for one node (issue 31, DESIGN.md §17): every
//! write and read it makes for an edge node goes to the API server as that node
//! (`system:node:<name>`, constrained impersonation, [`verge_runtime::as_node`]), so the API
//! server's Node authorizer and NodeRestriction admission bound it, not only edgecontroller's
//! own checks. Its own identity keeps the cluster-wide watches and what no node may do
//! (`deploy/cloud/access/rbac.yaml`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// One impersonating client per node, sharing the base client's connection pool; cheap to
/// clone (clones share the map).
#[derive(Clone)]
pub struct NodeClients {
    base: kube::Client,
    by_node: Arc<Mutex<HashMap<String, kube::Client>>>,
}

impl NodeClients {
    /// Clients built on `base` (edgecontroller's own identity, which needs the
    /// `impersonate:arbitrary-node` rules).
    pub fn new(base: kube::Client) -> Self {
        Self {
            base,
            by_node: Arc::default(),
        }
    }

    /// The client acting as `node`, made on first use.
    pub fn of(&self, node: &str) -> kube::Client {
        let mut map = self.by_node.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(node.to_owned())
            .or_insert_with(|| verge_runtime::as_node(&self.base, node))
            .clone()
    }

    /// Drops `node`'s client (its session ended); the next [`NodeClients::of`] makes another.
    pub fn forget(&self, node: &str) {
        self.by_node
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(node);
    }

    /// Nodes holding a client now.
    pub fn len(&self) -> usize {
        self.by_node
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no node holds a client.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
