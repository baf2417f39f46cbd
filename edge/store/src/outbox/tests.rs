use verge_core::{Group, Kind, MessageId, Module, ObjectVersion, ResourceKey, ResourceType, Write};

use crate::error::Error;

use super::*;

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("open");
    (dir, store)
}

/// A report of edged at edge path `resource`: a delete for a pod, an insert for a node or
/// an event, an update otherwise.
fn report(id: &str, resource: &str) -> Envelope {
    let key: ResourceKey = resource.parse().expect("edge path");
    let version = ObjectVersion::uid("u");
    let kind = match key.kind {
        ResourceType::Pod => Kind::Delete { key, version },
        ResourceType::Node | ResourceType::Event => Kind::Upsert {
            write: Write::Insert,
            key,
            version,
        },
        _ => Kind::Upsert {
            write: Write::Update,
            key,
            version,
        },
    };
    let mut envelope = Envelope::new(Module::Edged, Group::Resource, kind, b"{}".to_vec());
    envelope.id = MessageId::parse(id).expect("id");
    envelope
}

/// Puts `message` with a wire encoding that names its id.
fn put(s: &MetaStore, message: &Envelope, max: usize) -> crate::Result<()> {
    s.outbox_put(
        message,
        format!("wire {}", message.id.as_str()).as_bytes(),
        crate::OutboxLimits::entries(max),
    )
}

#[test]
fn keys_are_derived_from_the_report() {
    let web = ResourceKey::new("ns", ResourceType::Pod, "web");
    let key = |id: &str, resource: &str| OutboxKey::of(&report(id, resource));
    assert_eq!(
        key("1", "ns/podstatus/web"),
        Some(OutboxKey::pod_status(&web))
    );
    assert_eq!(
        key("2", "ns/pod/web"),
        Some(OutboxKey::pod_delete(&web, "u"))
    );
    assert_eq!(key("3", "_/node/n"), Some(OutboxKey::Node));
    assert_eq!(key("4", "_/nodestatus/n"), Some(OutboxKey::NodeStatus));
    assert_eq!(key("5", "ns/event/e1"), Some(OutboxKey::event("ns", "e1")));
    assert_eq!(key("6", "kube-node-lease/lease/n"), Some(OutboxKey::Lease));
    let task = OutboxKey::NodeTaskStatus {
        name: "imageprepulljob.cache".to_owned(),
    };
    assert_eq!(
        key("9", "_/nodetaskstatus/imageprepulljob.cache"),
        Some(task.clone())
    );
    assert_eq!(task.to_string(), "nodetaskstatus/imageprepulljob.cache");
    assert!(!task.is_droppable());
    assert_eq!(key("8", "ns/configmap/c"), None, "not a report");
    let (_dir, s) = store();
    assert!(matches!(
        put(&s, &report("7", "ns/configmap/c"), 10),
        Err(Error::NotAReport { .. })
    ));
}

fn ids(entries: &[OutboxEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.id.as_str()).collect()
}

#[test]
fn keys_have_their_documented_text() {
    let web = ResourceKey::new("ns", ResourceType::Pod, "web");
    assert_eq!(OutboxKey::pod_status(&web).to_string(), "podstatus/ns/web");
    assert_eq!(
        OutboxKey::pod_delete(&web, "u1").to_string(),
        "pod-delete/ns/web/u1"
    );
    assert_eq!(OutboxKey::NodeStatus.to_string(), "nodestatus");
    assert_eq!(OutboxKey::event("ns", "e1").to_string(), "event/ns/e1");
}

#[test]
fn coalescing_replaces_and_moves_to_the_end() {
    let (_dir, s) = store();
    put(&s, &report("a1", "ns/podstatus/a"), 10).expect("a1");
    put(&s, &report("b1", "ns/podstatus/b"), 10).expect("b1");
    put(&s, &report("n1", "_/node/n"), 10).expect("n1");
    put(&s, &report("a2", "ns/podstatus/a"), 10).expect("a2");
    assert_eq!(s.outbox_len().expect("len"), 3);
    let all = s.outbox_after(None, 100).expect("all");
    assert_eq!(ids(&all), ["b1", "n1", "a2"]);
    // A cursor sees only what was written after it; the limit bounds a batch.
    let after_b = s.outbox_after(Some(all[0].seq), 1).expect("after");
    assert_eq!(ids(&after_b), ["n1"]);
    let a = s.outbox_get("podstatus/ns/a").expect("get").expect("a");
    assert_eq!((a.id.as_str(), a.attempts), ("a2", 0));
}

#[test]
fn remove_only_if_it_still_holds_the_acked_id() {
    let (_dir, s) = store();
    put(&s, &report("a1", "ns/podstatus/a"), 10).expect("a1");
    put(&s, &report("a2", "ns/podstatus/a"), 10).expect("a2");
    assert!(
        !s.outbox_remove_if("podstatus/ns/a", "a1")
            .expect("stale ack")
    );
    assert_eq!(s.outbox_len().expect("len"), 1);
    assert_eq!(
        s.outbox_refused("podstatus/ns/a", "a1", true).expect("r"),
        None
    );
    assert_eq!(
        s.outbox_refused("podstatus/ns/a", "a2", true).expect("r"),
        Some(1)
    );
    assert_eq!(
        s.outbox_refused("podstatus/ns/a", "a2", false).expect("r"),
        Some(1)
    );
    assert_eq!(
        s.outbox_refused("podstatus/ns/a", "a2", true).expect("r"),
        Some(2)
    );
    assert!(s.outbox_remove_if("podstatus/ns/a", "a2").expect("ack"));
    assert_eq!(s.outbox_len().expect("len"), 0);
    assert!(s.outbox_after(None, 10).expect("empty").is_empty());
    assert!(!s.outbox_remove_if("podstatus/ns/a", "a2").expect("again"));
}

#[test]
fn a_full_outbox_refuses_new_events_only() {
    let (_dir, s) = store();
    put(&s, &report("e1", "ns/event/e1"), 2).expect("e1");
    put(&s, &report("a1", "ns/podstatus/a"), 2).expect("a1");
    let err = put(&s, &report("e2", "ns/event/e2"), 2).expect_err("full");
    assert!(matches!(err, Error::OutboxFull { entries: 2, .. }), "{err}");
    // A known event key is replaced; statuses and deletions always fit.
    put(&s, &report("e1b", "ns/event/e1"), 2).expect("e1 replaced");
    put(&s, &report("d", "ns/pod/web"), 2).expect("deletion");
    put(&s, &report("b1", "ns/podstatus/b"), 2).expect("status");
    assert_eq!(s.outbox_len().expect("len"), 4);
}

#[test]
fn a_source_holds_at_most_its_bytes_and_gets_them_back_when_acked() {
    let (_dir, s) = store();
    // "event/ns/eN" (11) + "eN" (2) + "wire eN" (7): 20 bytes per event; 50 hold two.
    let limits = crate::OutboxLimits {
        max_entries: 100,
        max_source_bytes: 50,
    };
    let put = |id: &str, path: &str| {
        let message = report(id, path);
        s.outbox_put(&message, format!("wire {id}").as_bytes(), limits)
    };
    put("e1", "ns/event/e1").expect("e1");
    put("e2", "ns/event/e2").expect("e2");
    let err = put("e3", "ns/event/e3").expect_err("event bytes used up");
    assert!(
        matches!(&err, Error::OutboxSourceFull { source_name, bytes: 40, .. } if source_name == "event"),
        "{err}"
    );
    assert!(
        err.is_outbox_full(),
        "logged and dropped like a full outbox"
    );
    // Replacing a key's report counts its new size only; other sources are not bounded by it.
    put("e1", "ns/event/e1").expect("e1 replaced");
    put("s1", "ns/podstatus/a").expect("status");
    // The cloud acks e1: its bytes come back.
    assert!(s.outbox_remove_if("event/ns/e1", "e1").expect("remove"));
    put("e3", "ns/event/e3").expect("e3 fits now");
}

#[test]
fn survives_reopen_and_keeps_the_sequence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edgecore.redb");
    let last = {
        let s = MetaStore::open(&path).expect("open");
        put(&s, &report("a1", "ns/podstatus/a"), 10).expect("a1");
        put(&s, &report("n1", "_/nodestatus/n"), 10).expect("n1");
        s.outbox_refused("nodestatus", "n1", true).expect("refused");
        s.outbox_after(None, 10).expect("all")[1].seq
    };
    let s = MetaStore::open(&path).expect("reopen");
    let all = s.outbox_after(None, 10).expect("all");
    assert_eq!(ids(&all), ["a1", "n1"]);
    assert_eq!(all[1].attempts, 1);
    assert_eq!(all[0].key, "podstatus/ns/a");
    assert_eq!(all[0].wire, b"wire a1");
    put(&s, &report("a2", "ns/podstatus/a"), 10).expect("a2");
    let newer = s.outbox_after(Some(last), 10).expect("newer");
    assert_eq!(ids(&newer), ["a2"]);
}
