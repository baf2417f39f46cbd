//! Unit tests of in-place resize against [`FakeRuntime`] (no Docker), under Tokio's paused
//! clock: in-place updates, restarts by `resizePolicy`, pending resizes (`Infeasible`,
//! `Deferred`), a memory limit below the usage, runtime failures, the allocation kept
//! across an edgecore restart, and resizes and admissions weighed against each other.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use serde_json::json;
use verge_container_runtime::fake::FakeRuntime;
use verge_core::TraceContext;

use super::state::PodState;
use super::tests::{Harness, IMAGE, harness, pod, settle, status};
use super::{Worker, WorkerMsg};
use crate::resize::Checkpoint;

// The node of the tests ([`super::tests::ALLOCATABLE`]): 4 CPUs and 8 GiB, all allocatable.

/// Generation `generation` of a Guaranteed pod whose container `c1` gets `cpu` and `memory`
/// with `policy` as its `resizePolicy`.
fn sized(generation: i64, cpu: &str, memory: &str, policy: serde_json::Value) -> Pod {
    let mut p = pod(json!({"restartPolicy": "OnFailure", "containers": [{
        "name": "c1", "image": IMAGE, "resizePolicy": policy,
        "resources": {"requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory}}}]}));
    p.metadata.generation = Some(generation);
    p
}

/// Another pod (uid `u-2`), whose container `o1` requests `cpu`.
fn other(cpu: &str) -> Pod {
    let mut p = pod(json!({"containers": [{"name": "o1", "image": IMAGE,
        "resources": {"requests": {"cpu": cpu}}}]}));
    p.metadata.name = Some("other".into());
    p.metadata.uid = Some("u-2".into());
    p
}

/// Hands `w` a newer pod, as the dispatcher does for a pod update.
fn update(w: &mut Worker<FakeRuntime>, pod: Pod) {
    w.apply(WorkerMsg::Update(Arc::new(pod), TraceContext::default()));
}

fn condition(w: &Worker<FakeRuntime>, type_: &str) -> Option<PodCondition> {
    let s = w.last_status.as_ref()?;
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// `(limits, requests)` of `field` (`resources`) or the allocated requests of `c1`.
fn shown(w: &Worker<FakeRuntime>, limits: bool, name: &str) -> Option<String> {
    let r = status(w, "c1").resources?;
    let list = if limits { r.limits } else { r.requests };
    list?.get(name).map(|q| q.0.clone())
}

fn allocated(w: &Worker<FakeRuntime>, name: &str) -> Option<String> {
    let a = status(w, "c1").allocated_resources?;
    a.get(name).map(|q| q.0.clone())
}

fn updates(h: &Harness) -> Vec<String> {
    h.rt.take_calls()
        .into_iter()
        .filter(|c| c.starts_with("update "))
        .collect()
}

fn reasons(h: &mut Harness) -> Vec<String> {
    h.events().into_iter().map(|(r, _)| r).collect()
}

async fn running(h: &mut Harness, p: &Pod) -> Worker<FakeRuntime> {
    let mut w = h.worker(p);
    let _ = settle(&mut w).await;
    assert_eq!(status(&w, "c1").restart_count, 0);
    let _ = (h.rt.take_calls(), h.events());
    w
}

#[tokio::test(start_paused = true)]
async fn a_resize_is_applied_in_place_and_reported() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    assert_eq!(shown(&w, true, "cpu").as_deref(), Some("20m"));
    assert_eq!(shown(&w, true, "memory").as_deref(), Some("35Mi"));
    assert_eq!(
        h.rt.instances("c1")[0].spec.oom_score_adj,
        Some(-997),
        "Guaranteed"
    );
    update(&mut w, sized(2, "25m", "40Mi", json!([])));
    let _ = settle(&mut w).await;
    let id = h.rt.instances("c1")[0].info.id.clone();
    // Memory first (with the CPU as it was), then CPU.
    assert_eq!(
        updates(&h),
        [
            format!("update {id} shares=20 quota=2000 memory={}", 40 << 20),
            format!("update {id} shares=25 quota=2500 memory={}", 40 << 20),
        ]
    );
    assert_eq!(h.rt.instances("c1").len(), 1, "no restart");
    assert_eq!(shown(&w, true, "cpu").as_deref(), Some("25m"));
    assert_eq!(shown(&w, false, "cpu").as_deref(), Some("25m"));
    assert_eq!(shown(&w, true, "memory").as_deref(), Some("40Mi"));
    assert_eq!(shown(&w, false, "memory").as_deref(), Some("40Mi"));
    assert_eq!(allocated(&w, "cpu").as_deref(), Some("25m"));
    assert!(condition(&w, "PodResizeInProgress").is_none());
    assert!(condition(&w, "PodResizePending").is_none());
    let events = h.events();
    let started = events
        .iter()
        .find(|(r, _)| r == "ResizeStarted")
        .expect("started");
    assert!(
        started
            .1
            .starts_with("Pod resize started: {\"containers\":[{\"name\":\"c1\"")
    );
    assert!(started.1.ends_with("\"generation\":2}"), "{}", started.1);
    assert!(
        events.iter().any(|(r, _)| r == "ResizeCompleted"),
        "{events:?}"
    );
    // The allocation and what was applied are on disk.
    let dir = h.ctx.config.pods_dir().join("u-1");
    let saved = Checkpoint::load(&dir).expect("load").expect("checkpoint");
    assert_eq!(saved.actuated["c1"].cpu_limit, 25);
    assert!(!saved.differs(&sized(2, "25m", "40Mi", json!([]))));
}

#[tokio::test(start_paused = true)]
async fn restart_container_policy_restarts_with_the_new_resources() {
    let mut h = harness();
    let policy = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", policy.clone())).await;
    update(&mut w, sized(2, "20m", "40Mi", policy));
    let _ = settle(&mut w).await;
    let instances = h.rt.instances("c1");
    assert_eq!(instances.len(), 2);
    assert_eq!(instances[1].spec.resources.memory, Some(40 << 20));
    assert_eq!(status(&w, "c1").restart_count, 1);
    assert!(updates(&h).is_empty(), "restarted, not updated");
    assert_eq!(shown(&w, true, "memory").as_deref(), Some("40Mi"));
    let events = h.events();
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Killing" && m == "Container c1 resize requires restart"),
        "{events:?}"
    );
    assert!(condition(&w, "PodResizeInProgress").is_none());
}

#[tokio::test(start_paused = true)]
async fn an_infeasible_resize_waits_and_new_instances_keep_the_allocation() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    update(&mut w, sized(2, "100", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    let pending = condition(&w, "PodResizePending").expect("pending");
    assert_eq!(pending.reason.as_deref(), Some("Infeasible"));
    assert_eq!(
        pending.message.as_deref(),
        Some("Node didn't have enough capacity: cpu, requested: 100000, capacity: 4000")
    );
    assert_eq!(pending.observed_generation, Some(2));
    assert_eq!(allocated(&w, "cpu").as_deref(), Some("20m"));
    assert!(updates(&h).is_empty());
    assert!(reasons(&mut h).contains(&"ResizeInfeasible".to_owned()));
    // A new instance is created with the allocation, not with the spec.
    let id = h.rt.instances("c1")[0].info.id.clone();
    h.rt.exit(&id, 1);
    let _ = settle(&mut w).await;
    let instances = h.rt.instances("c1");
    assert_eq!(instances.len(), 2);
    assert_eq!(instances[1].spec.resources.cpu_quota, Some(2000));
    // Back to the allocation: nothing pending any more.
    update(&mut w, sized(3, "20m", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    assert!(condition(&w, "PodResizePending").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_resize_deferred_by_an_admitted_pod_is_allocated_once_that_pod_is_gone() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    let mut o = h.worker(&other("3980m"));
    let _ = settle(&mut o).await;
    assert_eq!(o.state, PodState::Running, "admitted beside the 20m");
    update(&mut w, sized(2, "25m", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    let pending = condition(&w, "PodResizePending").expect("pending");
    assert_eq!(pending.reason.as_deref(), Some("Deferred"));
    assert_eq!(
        pending.message.as_deref(),
        Some("Node didn't have enough resource: cpu, requested: 25, used: 3980, capacity: 4000")
    );
    assert!(reasons(&mut h).contains(&"ResizeDeferred".to_owned()));
    assert_eq!(allocated(&w, "cpu").as_deref(), Some("20m"));
    let share = h.ctx.admitted.requests("u-1").map(|r| r.cpu_millis);
    assert_eq!(share, Some(20), "the pod keeps its share");
    o.apply(WorkerMsg::Deleted);
    let _ = settle(&mut o).await;
    assert!(!h.ctx.admitted.contains("u-2"));
    let _ = (h.rt.take_calls(), h.events());
    let _ = settle(&mut w).await;
    assert!(condition(&w, "PodResizePending").is_none());
    assert_eq!(shown(&w, true, "cpu").as_deref(), Some("25m"));
    assert_eq!(updates(&h).len(), 1, "CPU only");
}

#[tokio::test(start_paused = true)]
async fn a_memory_limit_below_the_usage_is_an_error_until_reverted() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    let id = h.rt.instances("c1")[0].info.id.clone();
    h.rt.set_memory_usage(&id, 20 << 20);
    update(&mut w, sized(2, "20m", "10Ki", json!([])));
    let _ = settle(&mut w).await;
    assert!(condition(&w, "PodResizePending").is_none());
    let c = condition(&w, "PodResizeInProgress").expect("in progress");
    assert_eq!(c.reason.as_deref(), Some("Error"));
    assert_eq!(
        c.message.as_deref(),
        Some(
            "cannot decrease memory limits: attempting to set container \"c1\" memory limit (10240) below current usage (20971520)"
        )
    );
    assert_eq!(c.observed_generation, Some(2));
    assert!(updates(&h).is_empty());
    assert_eq!(
        shown(&w, true, "memory").as_deref(),
        Some("35Mi"),
        "unchanged"
    );
    assert_eq!(allocated(&w, "memory").as_deref(), Some("10Ki"));
    assert!(reasons(&mut h).contains(&"ResizeError".to_owned()));
    update(&mut w, sized(3, "20m", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    assert!(condition(&w, "PodResizeInProgress").is_none());
    assert!(reasons(&mut h).contains(&"ResizeCompleted".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_runtime_failure_is_reported_and_retried() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    h.rt.fail_update("c1", "device or resource busy");
    update(&mut w, sized(2, "25m", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    let c = condition(&w, "PodResizeInProgress").expect("in progress");
    assert_eq!(c.reason.as_deref(), Some("Error"));
    assert!(
        c.message
            .is_some_and(|m| m.contains("device or resource busy"))
    );
    assert_eq!(shown(&w, true, "cpu").as_deref(), Some("20m"));
    h.rt.heal_update("c1");
    let _ = settle(&mut w).await;
    w.sync().await.expect("sync");
    assert!(condition(&w, "PodResizeInProgress").is_none());
    assert_eq!(shown(&w, true, "cpu").as_deref(), Some("25m"));
}

#[tokio::test(start_paused = true)]
async fn the_allocation_survives_an_edgecore_restart() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "20m", "35Mi", json!([]))).await;
    let mut o = h.worker(&other("3980m"));
    let _ = settle(&mut o).await;
    update(&mut w, sized(2, "25m", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    assert!(condition(&w, "PodResizePending").is_some(), "deferred");
    let status_then = w.last_status.clone();
    let mut other_then = other("3980m");
    other_then.status = o.last_status.clone();
    assert!(reasons(&mut h).contains(&"ResizeDeferred".to_owned()));
    drop((w, o));
    // A new worker over the same containers and pod directory, the pod's status as the API
    // server has it, both pods restored as admitted: the pod is counted at its allocation,
    // not its spec; the resize stays pending, nothing is applied, nothing reallocated.
    let mut restarted = sized(2, "25m", "35Mi", json!([]));
    restarted.status = status_then;
    let mut h = h.restarted(&[&restarted, &other_then]);
    let share = h.ctx.admitted.requests("u-1").map(|r| r.cpu_millis);
    assert_eq!(share, Some(20), "the allocation, not the spec's 25m");
    let mut w = h.worker(&restarted);
    let _ = settle(&mut w).await;
    assert_eq!(allocated(&w, "cpu").as_deref(), Some("20m"));
    assert!(condition(&w, "PodResizePending").is_some());
    assert!(updates(&h).is_empty());
    assert!(
        !reasons(&mut h).contains(&"ResizeDeferred".to_owned()),
        "not new"
    );
}

#[tokio::test(start_paused = true)]
async fn an_accepted_resize_is_seen_by_the_next_admission() {
    let mut h = harness();
    let mut w = running(&mut h, &sized(1, "1", "35Mi", json!([]))).await;
    update(&mut w, sized(2, "3", "35Mi", json!([])));
    let _ = settle(&mut w).await;
    assert_eq!(allocated(&w, "cpu").as_deref(), Some("3"));
    assert!(condition(&w, "PodResizePending").is_none());
    let share = h.ctx.admitted.requests("u-1").map(|r| r.cpu_millis);
    assert_eq!(share, Some(3000));
    // 1.5 CPUs fitted beside the pod before its resize; not any more.
    let mut o = h.worker(&other("1500m"));
    let _ = settle(&mut o).await;
    assert!(matches!(o.state, PodState::Rejected(_)), "{:?}", o.state);
    let s = o.last_status.clone().expect("status");
    assert_eq!(s.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        s.message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1500, used: \
             3000, capacity: 4000"
        )
    );
    assert!(h.rt.instances("o1").is_empty(), "nothing created");
}
