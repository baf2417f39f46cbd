use verge_core::ResourceType;

use super::*;

fn key() -> ResourceKey {
    ResourceKey::new("default", ResourceType::Pod, "web")
}

fn every_kind() -> Vec<Kind> {
    let version = ObjectVersion::new("uid-1", "42");
    let parent = MessageId::parse("parent-1").expect("id");
    let mut kinds: Vec<Kind> = [Write::Insert, Write::Update, Write::Patch]
        .into_iter()
        .map(|write| Kind::Upsert {
            write,
            key: key(),
            version: version.clone(),
        })
        .collect();
    kinds.extend([
        Kind::Delete {
            key: key(),
            version: ObjectVersion::uid("uid-1"),
        },
        Kind::Query { key: key() },
        Kind::Resync {
            key: ResourceKey::cluster(ResourceType::Node, "edge-1"),
        },
        Kind::Keepalive { answers: None },
        Kind::Keepalive {
            answers: Some(parent.clone()),
        },
    ]);
    for outcome in [
        Outcome::Ack,
        Outcome::Response,
        Outcome::Error("why".into()),
    ] {
        for key in [None, Some(key())] {
            kinds.push(Kind::Answer {
                to: parent.clone(),
                outcome: outcome.clone(),
                key,
            });
        }
    }
    kinds
}

fn envelope(kind: Kind) -> Envelope {
    let body = match kind {
        Kind::Answer {
            outcome: Outcome::Error(_),
            ..
        }
        | Kind::Keepalive { .. } => Vec::new(),
        _ => b"{\"a\":1}".to_vec(),
    };
    Envelope::new(Module::Edged, Group::Resource, kind, body)
}

#[test]
fn every_kind_round_trips_on_both_sides() {
    for kind in every_kind() {
        for node in [None, Some("edge-1")] {
            let mut e = envelope(kind.clone());
            if let (Some(node), Some(_)) = (node, e.key()) {
                e = e.at_node(node);
            }
            e.trace = TraceContext {
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                tracestate: "congo=t61rcWkgMzE".into(),
            };
            let wire = Message::from(e.clone());
            let bytes = wire.encode_to_vec();
            assert_eq!(decode(&bytes).as_ref(), Ok(&e), "{kind:?} at {node:?}");
            assert_eq!(Envelope::try_from(wire), Ok(e));
        }
    }
}

#[test]
fn wire_fields_follow_the_protocol() {
    let e = envelope(Kind::Upsert {
        write: Write::Update,
        key: key(),
        version: ObjectVersion::new("uid-1", "42"),
    })
    .at_node("edge-1");
    let m = Message::from(e.clone());
    let (h, r) = (
        m.header.clone().expect("header"),
        m.route.clone().expect("route"),
    );
    assert_eq!(h.id, e.id.as_str());
    assert_eq!(
        (h.uid.as_str(), h.resource_version.as_str(), h.sync),
        ("uid-1", "42", false)
    );
    assert_eq!(
        (
            r.source.as_str(),
            r.group.as_str(),
            r.operation.as_str(),
            r.resource.as_str()
        ),
        ("edged", "resource", "update", "node/edge-1/default/pod/web")
    );
    assert_eq!(m.trace_context, None, "an empty trace context is omitted");
    let q = Message::from(envelope(Kind::Query { key: key() }));
    assert!(q.header.expect("header").sync, "queries are sync");
    let err = e.answer(
        Module::MetaManager,
        Outcome::Error("bad".into()),
        b"ignored".to_vec(),
    );
    let m = Message::from(err);
    assert_eq!(m.content, b"bad", "an error's content is its reason");
    assert_eq!(m.header.expect("header").parent_id, e.id.as_str());
}

fn wire(id: &str, source: &str, group: &str, op: &str, resource: &str) -> Message {
    Message {
        header: Some(Header {
            id: id.into(),
            ..Header::default()
        }),
        route: Some(Route {
            source: source.into(),
            group: group.into(),
            operation: op.into(),
            resource: resource.into(),
        }),
        content: Vec::new(),
        trace_context: None,
    }
}

#[test]
fn bad_input_names_the_field() {
    let field =
        |m: Message| Envelope::try_from(m).map_err(|e| (e.message_id().to_owned(), e.field()));
    let ok = wire("m1", "edged", "resource", "update", "default/pod/web");
    assert!(field(ok.clone()).is_ok());
    let cases = [
        (
            wire("", "edged", "resource", "update", "default/pod/web"),
            "header.id",
        ),
        (
            Message {
                route: None,
                ..ok.clone()
            },
            "route",
        ),
        (
            wire("m1", "", "resource", "update", "default/pod/web"),
            "route.source",
        ),
        (
            wire("m1", "edged", "nope", "update", "default/pod/web"),
            "route.group",
        ),
        (
            wire("m1", "edged", "resource", "frob", "default/pod/web"),
            "route.operation",
        ),
        (
            wire("m1", "edged", "resource", "update", "default/frob/web"),
            "route.resource",
        ),
        (
            wire("m1", "edged", "resource", "update", "a/b"),
            "route.resource",
        ),
        (
            wire("m1", "edged", "resource", "update", "node/e/default/pod"),
            "route.resource",
        ),
        (
            wire("m1", "edged", "resource", "update", ""),
            "route.resource",
        ),
        (
            wire("m1", "edged", "resource", "resync", ""),
            "route.resource",
        ),
        (
            wire("m1", "edged", "resource", "ack", ""),
            "header.parent_id",
        ),
    ];
    for (m, expected) in cases {
        let id = m.header.as_ref().map(|h| h.id.clone()).unwrap_or_default();
        assert_eq!(field(m), Err((id, expected)), "{expected}");
    }
    let e = Envelope::try_from(wire("m1", "edged", "nope", "update", "default/pod/web"))
        .expect_err("bad group");
    assert_eq!(
        e.to_string(),
        "message \"m1\": invalid route.group: unknown group \"nope\""
    );
    assert!(matches!(decode(b"\xff\xff"), Err(Error::Decode(_))));
}

#[test]
fn unknown_sources_are_kept_and_paths_side_detected() {
    let e = Envelope::try_from(wire(
        "m1",
        "mapper-x",
        "device",
        "update",
        "node/e1/ns/twin/t",
    ))
    .expect("valid");
    assert_eq!(e.source, Module::Other("mapper-x".into()));
    assert_eq!(e.node.as_deref(), Some("e1"));
    assert_eq!(e.key().map(|k| k.kind), Some(ResourceType::Twin));
    // Three segments are always edge-side, even in a namespace called "node".
    let e =
        Envelope::try_from(wire("m2", "edged", "resource", "update", "node/pod/p")).expect("valid");
    assert_eq!(
        (e.node.as_deref(), e.key().map(|k| k.namespace.as_str())),
        (None, Some("node"))
    );
}
