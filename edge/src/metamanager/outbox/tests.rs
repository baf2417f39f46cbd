use crate::metamanager::error::Error as MetaError;
use verge_core::{Group, Operation, ResourceKey, ResourceType};
use verge_proto::Message;

use super::*;

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("open");
    (dir, store)
}

fn report(id: &str, resource: &str) -> Envelope {
    let op = match resource.split('/').nth(1) {
        Some("node" | "event") => Operation::Insert,
        Some("pod") => Operation::Delete,
        _ => Operation::Update,
    };
    let m = Message::build(id, "edged", Group::Resource, op, resource, b"{}".to_vec())
        .with_object("u", "");
    Envelope::try_from(m).expect("valid")
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
    assert_eq!(key("8", "ns/configmap/c"), None, "not a report");
    let (_dir, s) = store();
    assert!(matches!(
        s.outbox_put(&report("7", "ns/configmap/c"), 10),
        Err(crate::Error::MetaManager(MetaError::NotAReport { .. }))
    ));
}

fn ids(entries: &[OutboxEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.message.id.as_str()).collect()
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
    s.outbox_put(&report("a1", "ns/podstatus/a"), 10)
        .expect("a1");
    s.outbox_put(&report("b1", "ns/podstatus/b"), 10)
        .expect("b1");
    s.outbox_put(&report("n1", "_/node/n"), 10).expect("n1");
    s.outbox_put(&report("a2", "ns/podstatus/a"), 10)
        .expect("a2");
    assert_eq!(s.outbox_len().expect("len"), 3);
    let all = s.outbox_after(None, 100).expect("all");
    assert_eq!(ids(&all), ["b1", "n1", "a2"]);
    // A cursor sees only what was written after it; the limit bounds a batch.
    let after_b = s.outbox_after(Some(all[0].seq), 1).expect("after");
    assert_eq!(ids(&after_b), ["n1"]);
    let a = s.outbox_get("podstatus/ns/a").expect("get").expect("a");
    assert_eq!((a.message.id.as_str(), a.attempts), ("a2", 0));
}

#[test]
fn remove_only_if_it_still_holds_the_acked_id() {
    let (_dir, s) = store();
    s.outbox_put(&report("a1", "ns/podstatus/a"), 10)
        .expect("a1");
    s.outbox_put(&report("a2", "ns/podstatus/a"), 10)
        .expect("a2");
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
    s.outbox_put(&report("e1", "ns/event/e1"), 2).expect("e1");
    s.outbox_put(&report("a1", "ns/podstatus/a"), 2)
        .expect("a1");
    let err = s
        .outbox_put(&report("e2", "ns/event/e2"), 2)
        .expect_err("full");
    assert!(
        matches!(
            err,
            crate::Error::MetaManager(MetaError::OutboxFull { entries: 2, .. })
        ),
        "{err}"
    );
    // A known event key is replaced; statuses and deletions always fit.
    s.outbox_put(&report("e1b", "ns/event/e1"), 2)
        .expect("e1 replaced");
    s.outbox_put(&report("d", "ns/pod/web"), 2)
        .expect("deletion");
    s.outbox_put(&report("b1", "ns/podstatus/b"), 2)
        .expect("status");
    assert_eq!(s.outbox_len().expect("len"), 4);
}

#[test]
fn survives_reopen_and_keeps_the_sequence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edgecore.redb");
    let last = {
        let s = MetaStore::open(&path).expect("open");
        s.outbox_put(&report("a1", "ns/podstatus/a"), 10)
            .expect("a1");
        s.outbox_put(&report("n1", "_/nodestatus/n"), 10)
            .expect("n1");
        s.outbox_refused("nodestatus", "n1", true).expect("refused");
        s.outbox_after(None, 10).expect("all")[1].seq
    };
    let s = MetaStore::open(&path).expect("reopen");
    let all = s.outbox_after(None, 10).expect("all");
    assert_eq!(ids(&all), ["a1", "n1"]);
    assert_eq!(all[1].attempts, 1);
    assert_eq!(all[0].message.path(), "ns/podstatus/a");
    s.outbox_put(&report("a2", "ns/podstatus/a"), 10)
        .expect("a2");
    let newer = s.outbox_after(Some(last), 10).expect("newer");
    assert_eq!(ids(&newer), ["a2"]);
}
