//! Target `inventory`: bytes → a protobuf `Inventory` (what an edge's hello carries and
//! cloudhub replays to controllers) → edgecontroller's view of what the node holds
//! ([`desired::held_from_inventory`]) → the resync diff against a desired set made from the
//! same input → the resync plan of a freshly connected node with nothing desired
//! ([`NodeState::plan_objects`]), i.e. every message an inventory can make edgecontroller
//! send.
//!
//! Properties: nothing panics; only managed types are held (Nodes of any name: the node's
//! own and its site peers'); the diff of a set with itself is empty and against nothing is every
//! key; every planned message has a wire form that reads back (cloudhub would otherwise end
//! the controller's stream) and that cloudhub accepts for the node.

use std::collections::BTreeMap;

use prost::Message as _;
use verge_core::Kind;
use verge_edgecontroller::desired::{self, Versions};
use verge_edgecontroller::downstream::{Contents, NodeState};
use verge_proto::{Inventory, Message};

/// Decodes `data` as an inventory of [`crate::message::SESSION_NODE`] and checks it.
pub fn check(data: &[u8]) {
    if let Ok(inventory) = Inventory::decode(data) {
        check_inventory(crate::message::SESSION_NODE, &inventory);
    }
}

/// Checks what edgecontroller makes of `node`'s `inventory`. cloudhub only opens sessions
/// for valid node names, so other names are skipped.
pub fn check_inventory(node: &str, inventory: &Inventory) {
    if verge_cloudhub::validate_node_name(node).is_err() {
        return;
    }
    let held = desired::held_from_inventory(node, inventory);
    for key in held.keys() {
        // Node entries of any name: its own and its site peers' (trimmed) Nodes.
        assert!(desired::is_managed(key.kind), "{key} is not managed");
    }
    diffs(&held);
    plan(node, inventory, held.len());
}

/// The diff laws, with the held set and every other key of it as "desired".
fn diffs(held: &Versions) {
    let nothing = Versions::new();
    assert!(desired::diff(held, held).is_empty(), "held vs itself");
    assert_eq!(desired::diff(&nothing, held).deletes.len(), held.len());
    assert_eq!(desired::diff(held, &nothing).updates.len(), held.len());
    let half: Versions = held
        .iter()
        .step_by(2)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let d = desired::diff(&half, held);
    assert!(d.updates.is_empty(), "every desired key is held as desired");
    assert_eq!(d.deletes.len(), held.len() - half.len());
}

/// The plan of a node that connected with `inventory` and should hold nothing: a delete of
/// every held object, then the resync marker (after the node's own Node, if that is deleted).
fn plan(node: &str, inventory: &Inventory, held: usize) {
    let mut state = NodeState::connected(node, inventory, Contents::default());
    let messages = state.plan_objects(node, &BTreeMap::new());
    let deletes = messages
        .iter()
        .filter(|m| matches!(m.kind, Kind::Delete { .. }))
        .count();
    assert_eq!(deletes, held, "one delete per held object");
    assert!(messages.len() <= held + 1);
    for envelope in messages {
        let read = crate::message::read(Message::from(envelope.clone()))
            .expect("a planned message reads back at cloudhub");
        assert_eq!(read, envelope);
        verge_cloudhub::fuzzing::downstream(node, read)
            .expect("cloudhub queues a planned message for its node");
    }
}
