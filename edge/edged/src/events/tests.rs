use tokio::sync::mpsc;
use verge_core::Operation;
use verge_proto::{Message, MessageExt as _};

use super::*;

fn pod() -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: "web".into(),
        uid: "u-1".into(),
    }
}

fn recorder() -> (Recorder, mpsc::Receiver<verge_core::Envelope>) {
    let (hub, up) = EdgeHubHandle::detached(64);
    (Recorder::new(hub, "edge-1"), up)
}

fn next(up: &mut mpsc::Receiver<verge_core::Envelope>) -> Option<(String, Event)> {
    let m = Message::from(up.try_recv().ok()?);
    assert_eq!(m.operation().expect("op"), Operation::Insert);
    let e: Event = serde_json::from_slice(&m.content).expect("event");
    Some((m.resource().to_owned(), e))
}

#[tokio::test(start_paused = true)]
async fn events_look_like_the_kubelets() {
    let (r, mut up) = recorder();
    let fp = field_path("app", false);
    r.record(
        &pod(),
        Some(fp),
        EventType::Normal,
        "Started",
        "Started container app",
    );
    let (resource, e) = next(&mut up).expect("sent");
    let name = e.metadata.name.clone().expect("name");
    assert_eq!(resource, format!("ns/event/{name}"));
    let suffix = name.strip_prefix("web.").expect("<pod>.<hex>");
    assert_eq!(suffix.len(), 16);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    let o = &e.involved_object;
    assert_eq!(
        (
            o.kind.as_deref(),
            o.api_version.as_deref(),
            o.uid.as_deref()
        ),
        (Some("Pod"), Some("v1"), Some("u-1"))
    );
    assert_eq!(o.field_path.as_deref(), Some("spec.containers{app}"));
    assert_eq!((e.type_.as_deref(), e.count), (Some("Normal"), Some(1)));
    let src = e.source.expect("source");
    assert_eq!(
        (src.component.as_deref(), src.host.as_deref()),
        (Some("kubelet"), Some("edge-1"))
    );
    assert_eq!(e.reporting_component.as_deref(), Some("verge-edgecore"));
    assert_eq!(e.reporting_instance.as_deref(), Some("edge-1"));
    assert_eq!(e.first_timestamp, e.last_timestamp);
    assert_eq!(field_path("init", true), "spec.initContainers{init}");
}

#[tokio::test(start_paused = true)]
async fn repeats_bump_the_count_within_ten_minutes() {
    let (r, mut up) = recorder();
    let emit = || r.record(&pod(), None, EventType::Warning, "BackOff", "Back-off");
    emit();
    let (_, first) = next(&mut up).expect("first");
    tokio::time::advance(Duration::from_secs(30)).await;
    emit();
    let (_, again) = next(&mut up).expect("repeat");
    assert_eq!(again.metadata.name, first.metadata.name, "same event");
    assert_eq!(again.count, Some(2));
    assert_eq!(again.first_timestamp, first.first_timestamp);
    r.record(&pod(), None, EventType::Warning, "BackOff", "other message");
    let (_, other) = next(&mut up).expect("other");
    assert_ne!(
        other.metadata.name, first.metadata.name,
        "a new message is a new event"
    );
    tokio::time::advance(AGGREGATE_WINDOW + Duration::from_secs(1)).await;
    emit();
    let (_, later) = next(&mut up).expect("later");
    assert_ne!(later.metadata.name, first.metadata.name, "window passed");
    assert_eq!(later.count, Some(1));
}

#[tokio::test(start_paused = true)]
async fn each_pod_is_rate_limited() {
    let (r, mut up) = recorder();
    let burst = BURST as usize;
    for i in 0..burst + 5 {
        r.record(&pod(), None, EventType::Normal, "Pulled", format!("m{i}"));
    }
    let mut sent = 0;
    while next(&mut up).is_some() {
        sent += 1;
    }
    assert_eq!(sent, burst, "the burst, then nothing");
    let other = PodRef {
        uid: "u-2".into(),
        ..pod()
    };
    r.record(&other, None, EventType::Normal, "Pulled", "m");
    assert!(next(&mut up).is_some(), "another pod has its own bucket");
    tokio::time::advance(REFILL).await;
    r.record(&pod(), None, EventType::Normal, "Pulled", "m0");
    let (_, e) = next(&mut up).expect("refilled");
    assert_eq!(e.count, Some(2), "m0 again");
    r.record(&pod(), None, EventType::Normal, "Pulled", "m1");
    assert!(next(&mut up).is_none(), "one per second");
    r.forget("u-1");
    r.record(&pod(), None, EventType::Normal, "Pulled", "m1");
    let (_, e) = next(&mut up).expect("forgotten: a fresh bucket");
    assert_eq!(e.count, Some(1));
}

#[test]
fn names_are_unique_and_bounded() {
    let mut last = 0;
    let a = unique_name(&mut last, "p");
    let b = unique_name(&mut last, "p");
    assert_ne!(a, b);
    assert_eq!(unique_name(&mut last, &"x".repeat(300)).len(), 253);
}
