use std::time::{Duration, Instant};

use verge_core::{Envelope, Group, Operation};
use verge_proto::Message;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(10);

fn queue(capacity: usize, max_inflight: usize) -> DeliveryQueue {
    DeliveryQueue::new(Limits {
        capacity,
        max_inflight,
        ack_timeout: TIMEOUT,
        max_retries: 2,
    })
}

fn object(id: &str, op: Operation, resource: &str) -> Envelope {
    Envelope::try_from(Message::build(
        id,
        "edgecontroller",
        Group::Resource,
        op,
        resource,
        Vec::new(),
    ))
    .expect("valid")
}

fn pod(id: &str, name: &str) -> Envelope {
    object(id, Operation::Update, &format!("default/pod/{name}"))
}

fn ack(id: &str) -> Envelope {
    Envelope::try_from(Message::reply(
        format!("a-{id}"),
        id,
        "edgecontroller",
        Group::Resource,
        Operation::Ack,
        "",
        Vec::new(),
    ))
    .expect("valid")
}

/// Drains what may be sent at `now`, as ids.
fn drain(q: &mut DeliveryQueue, now: Instant) -> Vec<String> {
    std::iter::from_fn(|| q.next_to_send(now))
        .map(|m| m.id.to_string())
        .collect()
}

#[test]
fn coalesces_versions_behind_the_one_in_flight() {
    let mut q = queue(8, 8);
    let now = Instant::now();
    q.push(pod("v1", "web"), Some(1)).expect("room");
    assert_eq!(drain(&mut q, now), ["v1"]);
    q.push(pod("v2", "web"), Some(1)).expect("room");
    q.push(pod("v3", "web"), Some(1)).expect("room");
    assert_eq!(q.waiting(), 1, "only the newest version waits");
    assert!(
        drain(&mut q, now).is_empty(),
        "never two in flight for one key"
    );
    assert!(q.ack("v1"));
    assert_eq!(drain(&mut q, now), ["v3"]);
    assert!(q.ack("v3"));
    assert!(drain(&mut q, now).is_empty());
    assert_eq!((q.waiting(), q.inflight()), (0, 0));
}

#[test]
fn patches_queue_behind_and_full_state_replaces_them() {
    let mut q = queue(8, 8);
    let now = Instant::now();
    q.push(pod("v1", "web"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["v1"]);
    q.push(object("p1", Operation::Patch, "default/pod/web"), None)
        .expect("room");
    q.push(object("p2", Operation::Patch, "default/pod/web"), None)
        .expect("room");
    assert_eq!(q.waiting(), 2);
    q.push(object("d", Operation::Delete, "default/pod/web"), None)
        .expect("room");
    assert_eq!(q.waiting(), 1);
    q.ack("v1");
    assert_eq!(drain(&mut q, now), ["d"]);
}

#[test]
fn answers_go_first_in_fifo_order() {
    let mut q = queue(8, 8);
    let now = Instant::now();
    q.push(pod("p1", "a"), None).expect("room");
    for id in ["x1", "x2", "x3"] {
        q.push(ack(id), None).expect("room");
    }
    q.push(pod("p2", "b"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["a-x1", "a-x2", "a-x3", "p1", "p2"]);
    assert_eq!(q.inflight(), 2, "answers are not tracked");
    assert!(!q.ack("a-x1"));
}

#[test]
fn unacked_message_is_resent_with_the_same_id() {
    let mut q = queue(8, 8);
    let start = Instant::now();
    q.push(pod("v1", "web"), None).expect("room");
    assert_eq!(drain(&mut q, start), ["v1"]);
    assert_eq!(q.take_resends(), 0, "a first send is no resend");
    assert_eq!(q.next_deadline(), Some(start + TIMEOUT));
    assert!(q.expired(start + TIMEOUT / 2).is_empty());
    assert!(drain(&mut q, start + TIMEOUT / 2).is_empty(), "not yet");
    let later = start + TIMEOUT;
    assert!(q.expired(later).is_empty());
    assert_eq!(drain(&mut q, later), ["v1"]);
    assert_eq!(
        q.take_resends(),
        1,
        "counted for verge_cloudhub_delivery_retries_total"
    );
    assert_eq!(q.take_resends(), 0, "taken");
    assert_eq!(q.next_deadline(), Some(later + TIMEOUT));
    assert!(q.ack("v1"));
    assert_eq!((q.inflight(), q.next_deadline()), (0, None));
    assert!(q.expired(later + TIMEOUT * 5).is_empty());
}

#[test]
fn ack_clears_and_frees_the_key() {
    let mut q = queue(8, 8);
    let now = Instant::now();
    q.push(pod("v1", "web"), None).expect("room");
    drain(&mut q, now);
    assert!(q.ack("v1"));
    assert!(!q.ack("v1"), "a duplicate ack is ignored");
    assert!(!q.ack("unknown"));
    q.push(pod("v2", "web"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["v2"]);
}

#[test]
fn gives_up_after_max_retries() {
    let mut q = queue(8, 8);
    let mut now = Instant::now();
    q.push(pod("v1", "web"), Some(7)).expect("room");
    assert_eq!(drain(&mut q, now), ["v1"]);
    q.push(pod("v2", "web"), Some(7)).expect("room");
    for _ in 0..2 {
        now += TIMEOUT;
        assert!(q.expired(now).is_empty());
        assert_eq!(drain(&mut q, now), ["v1"], "a retry, same id");
    }
    now += TIMEOUT;
    let dropped = q.expired(now);
    assert_eq!(
        dropped,
        [Unacked {
            message_id: "v1".into(),
            origin: Some(7),
            attempts: 3,
        }]
    );
    assert_eq!(drain(&mut q, now), ["v2"], "the key is free again");
}

#[test]
fn full_queue_refuses_without_change() {
    let mut q = queue(2, 1);
    let now = Instant::now();
    q.push(pod("a1", "a"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["a1"]);
    q.push(pod("b1", "b"), None).expect("room");
    q.push(pod("c1", "c"), None).expect("room");
    assert!(drain(&mut q, now).is_empty(), "max_inflight reached");
    assert_eq!(q.push(pod("d1", "d"), None), Err(QueueFull { waiting: 2 }));
    assert_eq!(q.push(ack("z"), None), Err(QueueFull { waiting: 2 }));
    // A newer version of a waiting object still fits: it replaces the old one.
    q.push(pod("c2", "c"), None).expect("replaces");
    assert_eq!(q.waiting(), 2);
    q.ack("a1");
    assert_eq!(drain(&mut q, now), ["b1"]);
    q.ack("b1");
    assert_eq!(drain(&mut q, now), ["c2"]);
}

#[test]
fn max_inflight_does_not_hold_back_answers_or_resends() {
    let mut q = queue(8, 1);
    let now = Instant::now();
    q.push(pod("a1", "a"), None).expect("room");
    q.push(pod("b1", "b"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["a1"]);
    q.push(ack("x"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["a-x"]);
    q.expired(now + TIMEOUT);
    assert_eq!(drain(&mut q, now + TIMEOUT), ["a1"]);
    q.ack("a1");
    assert_eq!(drain(&mut q, now + TIMEOUT), ["b1"]);
}

/// The span id in a `traceparent` (`00-<trace>-<span>-<flags>`).
fn span_id(trace: &verge_core::TraceContext) -> String {
    trace
        .traceparent
        .split('-')
        .nth(2)
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_traced_message_waits_and_is_resent_in_one_deliver_span() {
    let capture = verge_telemetry::testing::SpanCapture::start("cloudhub");
    let sender = verge_telemetry::span!("controller.send");
    let sent_in = verge_telemetry::propagation::inject(&sender);
    drop(sender);
    let mut q = queue(10, 10);
    let mut message = pod("m1", "web");
    message.trace = sent_in.clone();
    q.push(message, None).expect("room");
    q.push(pod("m2", "untraced"), None).expect("room");
    let now = Instant::now();
    let first = q.next_to_send(now).expect("sent");
    assert_eq!(
        verge_telemetry::propagation::trace_id(&first.trace),
        verge_telemetry::propagation::trace_id(&sent_in),
        "the edge continues the same trace"
    );
    assert_ne!(
        span_id(&first.trace),
        span_id(&sent_in),
        "as a child of cloudhub's span"
    );
    let untraced = q.next_to_send(now).expect("sent");
    assert!(
        untraced.trace.is_empty(),
        "no trace is started for an untraced message"
    );
    assert!(q.expired(now + TIMEOUT).is_empty());
    let again = q.next_to_send(now + TIMEOUT).expect("resent");
    assert_eq!(again.trace, first.trace);
    assert!(q.ack("m1"));

    let deliver = capture.span("cloudhub.deliver");
    assert_eq!(deliver.parent_span_id.to_string(), span_id(&sent_in));
    assert_eq!(
        deliver.span_context.span_id().to_string(),
        span_id(&first.trace)
    );
    let attempts = deliver
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "verge.attempts")
        .map(|kv| kv.value.to_string());
    assert_eq!(attempts.as_deref(), Some("2"));
    assert!(
        deliver
            .events
            .iter()
            .any(|e| e.name == "resending unanswered message"),
        "{:?}",
        deliver.events
    );
    assert_eq!(capture.names(), vec!["controller.send", "cloudhub.deliver"]);
}

#[test]
fn an_idle_queue_releases_its_tables() {
    let mut q = queue(8, 8);
    let now = Instant::now();
    q.push(pod("v1", "web"), Some(1)).expect("room");
    q.push(ack("x"), None).expect("room");
    assert_eq!(drain(&mut q, now), ["a-x", "v1"]);
    q.release_idle_tables();
    assert!(q.inflight.capacity() > 0, "a table in use is kept");
    assert!(q.ack("v1"));
    q.release_idle_tables();
    let capacities = [
        q.inflight.capacity(),
        q.inflight_keys.capacity(),
        q.waiting.capacity(),
        q.answers.capacity(),
        q.ready.capacity(),
        q.due.capacity(),
    ];
    assert_eq!(capacities, [0; 6]);
    q.push(pod("v2", "web"), Some(1)).expect("room");
    assert_eq!(drain(&mut q, now), ["v2"], "and works as before");
}
