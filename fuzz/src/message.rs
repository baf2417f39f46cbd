//! Target `message_decode`: bytes → prost decoding of every frame a Verge stream reads
//! (`EdgeFrame` at cloudhub from an edge, `ControllerFrame` at cloudhub from a controller,
//! `CloudFrame` at edgehub, `HubFrame` at edgecontroller) and of a bare `Message` (the
//! stored form in edgecore's redb, [`verge_proto::envelope::decode`]); then the boundary
//! conversion `TryFrom<Message> for Envelope` and cloudhub's routing rules.
//!
//! Properties: nothing panics; an envelope that was read writes a wire form that reads back
//! to the same envelope, and that wire form is a fixed point; the stored form round-trips;
//! cloudhub's and verge-pki's node-name rules agree; what cloudhub forwards upstream carries
//! the session's node, and what it queues downstream is edge-side.

use prost::Message as _;
use verge_core::Envelope;
use verge_proto::Message;
use verge_proto::hub::{
    CloudFrame, ControllerFrame, EdgeFrame, HubFrame, Routed, cloud_frame, controller_frame,
    edge_frame, hub_frame,
};

/// The node an edge session belongs to in these checks.
pub const SESSION_NODE: &str = "edge-1";

/// Decodes `data` as each frame type and as a stored message, and checks what follows.
pub fn check(data: &[u8]) {
    if let Ok(message) = Message::decode(data) {
        read(message);
    }
    stored(data);
    if let Ok(frame) = EdgeFrame::decode(data) {
        edge_frame(frame);
    }
    if let Ok(frame) = ControllerFrame::decode(data) {
        controller_frame(frame);
    }
    if let Ok(CloudFrame {
        frame: Some(cloud_frame::Frame::Message(message)),
    }) = CloudFrame::decode(data)
    {
        read(message);
    }
    if let Ok(frame) = HubFrame::decode(data) {
        match frame.frame {
            Some(hub_frame::Frame::Message(Routed {
                message: Some(message),
                ..
            })) => {
                read(message);
            }
            Some(hub_frame::Frame::Session(session)) => {
                if let Some(inventory) = session.inventory {
                    crate::inventory::check_inventory(&session.node, &inventory);
                }
            }
            _ => {}
        }
    }
}

/// `envelope::decode` of stored bytes: whatever it accepts is stored again unchanged.
fn stored(data: &[u8]) {
    let Ok(envelope) = verge_proto::envelope::decode(data) else {
        return;
    };
    let again = verge_proto::envelope::decode(&verge_proto::envelope::encode(&envelope))
        .expect("a stored envelope reads back");
    assert_eq!(normalised(envelope), again, "stored form round trip");
}

/// Reads a wire message at a stream boundary; checks the round trip of what was read.
pub fn read(message: Message) -> Option<Envelope> {
    let envelope = Envelope::try_from(message).ok()?;
    let wire = Message::from(envelope.clone());
    let again = Envelope::try_from(wire.clone()).expect("an envelope's wire form reads back");
    assert_eq!(
        normalised(envelope.clone()),
        again,
        "envelope → wire → envelope"
    );
    assert_eq!(Message::from(again), wire, "the wire form is a fixed point");
    Some(envelope)
}

/// The envelope as its wire form carries it: a node without a resource key has no path to
/// carry it (e.g. a keepalive whose `route.resource` was a cloud-side path), so it is dropped.
pub fn normalised(mut envelope: Envelope) -> Envelope {
    if envelope.key().is_none() {
        envelope.node = None;
    }
    envelope
}

/// cloudhub's `EdgeHub.Connect`: the hello's node name, then a message of the session.
fn edge_frame(frame: EdgeFrame) {
    match frame.frame {
        Some(edge_frame::Frame::Hello(hello)) => {
            crate::path::node_name(&hello.node_name);
            if let Some(inventory) = hello.inventory {
                crate::inventory::check_inventory(&hello.node_name, &inventory);
            }
        }
        Some(edge_frame::Frame::Message(message)) => {
            if let Some(envelope) = read(message) {
                crate::path::route_upstream(SESSION_NODE, envelope);
            }
        }
        None => {}
    }
}

/// cloudhub's `ControllerHub.Attach`: the hello's groups, then a routed downstream message.
fn controller_frame(frame: ControllerFrame) {
    match frame.frame {
        Some(controller_frame::Frame::Hello(hello)) => {
            if let Ok(groups) = verge_cloudhub::fuzzing::controller_hello(&hello) {
                assert!(!groups.is_empty(), "a controller serves some group");
                assert!(
                    !groups.contains(&verge_core::Group::Hub),
                    "the hub group is cloudhub's own"
                );
            }
        }
        Some(controller_frame::Frame::Message(Routed {
            node,
            message: Some(message),
        })) => {
            if let Some(envelope) = read(message) {
                crate::path::route_downstream(&node, envelope);
            }
        }
        _ => {}
    }
}
