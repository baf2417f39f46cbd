//! Admission, restoration, claims and resizes in the registry, and `ran_before`.

use serde_json::json;

use super::*;
use crate::admission::fit::Pending;

fn node(pods: u64) -> Allocatable {
    Allocatable {
        cpu_millis: 1000,
        memory_bytes: 1 << 30,
        ephemeral_storage_bytes: 0,
        pods,
    }
}

fn pod(uid: &str, cpu: &str, host_port: Option<i32>, phase: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": uid, "uid": uid},
        "spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu}},
            "ports": [{"containerPort": 80, "hostPort": host_port}]}]},
        "status": {"phase": phase},
    }))
    .expect("pod")
}

#[test]
fn admission_registers_and_a_dropped_ticket_frees_the_share() {
    let admitted = Admitted::new(node(10));
    let a = admitted
        .admit("a", &pod("a", "600m", Some(80), None))
        .expect("fits");
    assert!(admitted.contains("a"));
    let refused = admitted.admit("b", &pod("b", "500m", None, None));
    assert_eq!(refused.map(|_| ()).map_err(|e| e.0), Err("OutOfcpu"));
    let refused = admitted.admit("c", &pod("c", "100m", Some(80), None));
    assert_eq!(refused.map(|_| ()).map_err(|e| e.0), Err("NodePorts"));
    assert!(
        !admitted.contains("b") && !admitted.contains("c"),
        "not registered"
    );
    drop(a);
    assert!(!admitted.contains("a"));
    let b = admitted.admit("b", &pod("b", "500m", Some(80), None));
    assert!(b.is_ok(), "the share was freed");
}

#[test]
fn restored_pods_are_not_checked_against_each_other_but_new_ones_are() {
    let admitted = Admitted::new(node(2));
    let (a, b) = (
        pod("a", "800m", Some(80), Some("Running")),
        pod("b", "800m", Some(80), Some("Running")),
    );
    admitted.restore([&a, &b]);
    let ta = admitted.claim("a").expect("restored");
    assert!(admitted.claim("a").is_none(), "claimed once");
    let tb = admitted
        .admit("b", &b)
        .expect("a restored pod is admitted as it is");
    let refused = admitted.admit("n", &pod("n", "0", None, None));
    assert_eq!(refused.map(|_| ()).map_err(|e| e.0), Err("OutOfpods"));
    drop((ta, tb));
    assert!(admitted.admit("n", &pod("n", "0", None, None)).is_ok());
}

fn cpu(cpu_millis: u64) -> Requests {
    Requests {
        cpu_millis,
        ..Requests::default()
    }
}

#[test]
fn an_accepted_resize_is_seen_by_the_next_admission() {
    let admitted = Admitted::new(node(10));
    let _a = admitted
        .admit("a", &pod("a", "400m", Some(80), None))
        .expect("fits");
    assert!(admitted.admit("b", &pod("b", "500m", None, None)).is_ok());
    assert_eq!(admitted.resize("a", &cpu(900)), Ok(()));
    assert_eq!(admitted.requests("a"), Some(cpu(900)));
    let refused = admitted.admit("b", &pod("b", "500m", None, None));
    assert_eq!(
        refused.map(|_| ()),
        Err((
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 500, used: 900, capacity: 1000"
                .to_owned()
        ))
    );
    let refused = admitted.admit("c", &pod("c", "0", Some(80), None));
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.0),
        Err("NodePorts"),
        "the resized pod keeps its host ports"
    );
}

#[test]
fn a_resize_is_deferred_by_the_other_pods_and_infeasible_alone() {
    let admitted = Admitted::new(node(10));
    let _a = admitted
        .admit("a", &pod("a", "200m", None, None))
        .expect("fits");
    let b = admitted
        .admit("b", &pod("b", "700m", None, None))
        .expect("fits");
    assert_eq!(
        admitted.resize("a", &cpu(400)),
        Err(Insufficient {
            pending: Pending::Deferred,
            message: "Node didn't have enough resource: cpu, requested: 400, used: 700, \
                      capacity: 1000"
                .to_owned(),
        })
    );
    assert_eq!(admitted.requests("a"), Some(cpu(200)), "kept");
    assert_eq!(
        admitted.resize("a", &cpu(1001)),
        Err(Insufficient {
            pending: Pending::Infeasible,
            message: "Node didn't have enough capacity: cpu, requested: 1001, capacity: 1000"
                .to_owned(),
        })
    );
    assert_eq!(
        admitted.resize("a", &cpu(300)),
        Ok(()),
        "the pod's own share"
    );
    drop(b);
    assert_eq!(
        admitted.resize("a", &cpu(1000)),
        Ok(()),
        "b's share was freed"
    );
    assert_eq!(
        admitted.resize("gone", &cpu(1)),
        Err(Insufficient {
            pending: Pending::Deferred,
            message: "Node didn't have enough resource: cpu, requested: 1, used: 1000, \
                  capacity: 1000"
                .to_owned(),
        }),
        "an unregistered pod is only checked"
    );
    assert!(!admitted.contains("gone"));
}

#[test]
fn pods_are_counted_at_the_allocation_of_their_saved_checkpoint() {
    // Before the restart, `a` (now asking for 300m) was allocated 800m, and `p` (now
    // asking for 900m, never started) 100m.
    let saved = HashMap::from([
        (
            "a".to_owned(),
            Checkpoint::admitted(&pod("a", "800m", None, None)),
        ),
        (
            "p".to_owned(),
            Checkpoint::admitted(&pod("p", "100m", None, None)),
        ),
    ]);
    let admitted = Admitted::with_allocations(node(10), saved);
    admitted.restore([&pod("a", "300m", None, Some("Running"))]);
    assert_eq!(admitted.requests("a"), Some(cpu(800)));
    let refused = admitted.admit("n", &pod("n", "300m", None, None));
    assert_eq!(refused.map(|_| ()).map_err(|e| e.0), Err("OutOfcpu"));
    let p = admitted.admit("p", &pod("p", "900m", None, None));
    assert!(p.is_ok(), "admitted at its allocation");
    assert_eq!(admitted.requests("p"), Some(cpu(100)));
}

#[test]
fn pods_ran_before_when_running_or_with_containers_and_not_terminal() {
    let with = HashSet::from(["c".to_owned(), "done".to_owned()]);
    assert!(ran_before(&pod("r", "0", None, Some("Running")), &with));
    assert!(ran_before(&pod("c", "0", None, Some("Pending")), &with));
    assert!(!ran_before(&pod("p", "0", None, Some("Pending")), &with));
    assert!(!ran_before(
        &pod("done", "0", None, Some("Succeeded")),
        &with
    ));
}
