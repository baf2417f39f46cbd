use std::collections::HashSet;

use super::*;
use crate::ResourceType;

fn pod() -> ResourceKey {
    ResourceKey::new("default", ResourceType::Pod, "web")
}

fn upsert(write: Write) -> Envelope {
    let kind = Kind::Upsert {
        write,
        key: pod(),
        version: ObjectVersion::new("u", "7"),
    };
    Envelope::new(
        Module::EdgeController,
        Group::Resource,
        kind,
        b"{}".to_vec(),
    )
}

#[test]
fn ids_are_unique_uuids() {
    let ids: HashSet<MessageId> = (0..1000).map(|_| MessageId::new()).collect();
    assert_eq!(ids.len(), 1000);
    let id = MessageId::new();
    assert_eq!(id.as_str().len(), 36);
    assert_eq!(id.as_str().as_bytes()[14], b'4', "version 4");
    assert_ne!(upsert(Write::Update).id, upsert(Write::Update).id);
    assert_eq!(MessageId::parse(""), Err(crate::Error::EmptyMessageId));
    assert_eq!(
        MessageId::parse("m1").map(String::from),
        Ok("m1".to_owned())
    );
    // A peer's ids are bounded (issue 31: ids are kept per message in flight).
    assert!(MessageId::parse("x".repeat(super::MAX_MESSAGE_ID_BYTES)).is_ok());
    assert_eq!(
        MessageId::parse("x".repeat(super::MAX_MESSAGE_ID_BYTES + 1)),
        Err(crate::Error::MessageIdTooLong {
            len: super::MAX_MESSAGE_ID_BYTES + 1,
            max: super::MAX_MESSAGE_ID_BYTES,
        })
    );
}

#[test]
fn modules_parse_with_unknown_kept() {
    for m in [
        Module::EdgeHub,
        Module::MetaManager,
        Module::Edged,
        Module::Node,
        Module::DeviceTwin,
        Module::CloudHub,
        Module::EdgeController,
        Module::DeviceController,
        Module::FleetController,
    ] {
        assert_eq!(m.as_str().parse::<Module>(), Ok(m));
    }
    assert_eq!(
        "mapper".parse::<Module>(),
        Ok(Module::Other("mapper".into()))
    );
    assert_eq!("".parse::<Module>(), Err(crate::Error::EmptySource));
}

#[test]
fn delivery_key_and_superseding_follow_the_kind() {
    for (write, supersedes) in [
        (Write::Insert, true),
        (Write::Update, true),
        (Write::Patch, false),
    ] {
        let e = upsert(write);
        assert_eq!(e.delivery_key(), Some(&pod()));
        assert_eq!(e.supersedes(), supersedes, "{write:?}");
    }
    let delete = Envelope::new(
        Module::EdgeController,
        Group::Resource,
        Kind::Delete {
            key: pod(),
            version: ObjectVersion::uid("u"),
        },
        Vec::new(),
    );
    assert!(delete.supersedes());
    let query = Envelope::new(
        Module::Edged,
        Group::Resource,
        Kind::Query { key: pod() },
        vec![],
    );
    assert_eq!(query.delivery_key(), Some(&pod()));
    assert!(!query.supersedes());
    let ack = delete.answer(Module::MetaManager, Outcome::Ack, Vec::new());
    assert_eq!(ack.delivery_key(), None, "answers are not coalesced");
    assert_eq!(ack.key(), Some(&pod()), "but name the resource");
    assert_eq!(ack.parent(), Some(&delete.id));
    let ka = Envelope::keepalive(Module::EdgeHub, None);
    assert_eq!((ka.delivery_key(), ka.group), (None, Group::Hub));
}

#[test]
fn paths_render_per_side() {
    let e = upsert(Write::Update);
    assert_eq!(e.path(), "default/pod/web");
    assert_eq!(e.node_resource(), None);
    let e = e.at_node("edge-1");
    assert_eq!(e.path(), "node/edge-1/default/pod/web");
    assert_eq!(
        e.node_resource().map(|r| r.to_string()),
        Some("node/edge-1/default/pod/web".into())
    );
    let answer = e.answer(Module::MetaManager, Outcome::Error("no".into()), Vec::new());
    assert_eq!(answer.path(), "node/edge-1/default/pod/web");
    assert_eq!(answer.error_reason(), Some("no"));
    assert_eq!(answer.operation(), Operation::Error);
    assert_eq!(Envelope::keepalive(Module::CloudHub, None).path(), "");
}
