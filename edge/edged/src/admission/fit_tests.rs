//! Effective requests, host-port conflicts and the kubelet's reasons and messages.

use serde_json::json;

use super::*;

const GI: u64 = 1 << 30;

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({ "spec": spec })).expect("pod")
}

fn requesting(cpu: &str, memory: &str) -> serde_json::Value {
    json!({"requests": {"cpu": cpu, "memory": memory}})
}

fn node() -> Allocatable {
    Allocatable {
        cpu_millis: 2000,
        memory_bytes: 4 * GI,
        ephemeral_storage_bytes: 10 * GI,
        pods: 3,
    }
}

#[test]
fn allocatable_reads_the_node_status_quantities() {
    let q = |s: &str| Quantity(s.into());
    let map = BTreeMap::from([
        ("cpu".to_owned(), q("3500m")),
        ("memory".to_owned(), q("15728640Ki")),
        ("pods".to_owned(), q("110")),
    ]);
    assert_eq!(
        Allocatable::from_quantities(&map),
        Allocatable {
            cpu_millis: 3500,
            memory_bytes: 15 * GI,
            ephemeral_storage_bytes: 0,
            pods: 110,
        }
    );
}

#[test]
fn the_effective_request_sums_app_containers_and_sidecars_and_peaks_over_init() {
    let p = pod(json!({
        "initContainers": [
            {"name": "setup", "resources": requesting("1500m", "1Gi")},
            {"name": "proxy", "restartPolicy": "Always", "resources": requesting("200m", "64Mi")},
            {"name": "migrate", "resources": requesting("100m", "3Gi")},
        ],
        "containers": [
            {"name": "a", "resources": requesting("300m", "256Mi")},
            {"name": "b", "resources": {"requests": {"ephemeral-storage": "1Gi"}}},
        ],
        "overhead": {"cpu": "10m", "memory": "1Mi"},
    }));
    // cpu: max(300 + 200, 1500, 100 + 200) + 10; memory: max(256 + 64 Mi, 1 Gi, 3 Gi + 64 Mi)
    // + 1 Mi.
    assert_eq!(
        Requests::of_pod(&p),
        Requests {
            cpu_millis: 1510,
            memory_bytes: 3 * GI + (65 << 20),
            ephemeral_storage_bytes: GI,
        }
    );
}

#[test]
fn pod_level_requests_replace_the_containers_cpu_and_memory() {
    let p = pod(json!({
        "resources": {"requests": {"cpu": "1"}},
        "containers": [{"name": "a", "resources": requesting("300m", "256Mi")}],
    }));
    let r = Requests::of_pod(&p);
    assert_eq!((r.cpu_millis, r.memory_bytes), (1000, 256 << 20));
}

#[test]
fn host_ports_come_from_app_containers_and_sidecars_with_defaults() {
    let p = pod(json!({
        "initContainers": [
            {"name": "setup", "ports": [{"containerPort": 1, "hostPort": 1}]},
            {"name": "proxy", "restartPolicy": "Always",
                "ports": [{"containerPort": 2, "hostPort": 2, "protocol": "UDP"}]},
        ],
        "containers": [{"name": "a", "ports": [
            {"containerPort": 80},
            {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"},
        ]}],
    }));
    let port = |ip: &str, protocol: &str, port| HostPort {
        ip: ip.into(),
        protocol: protocol.into(),
        port,
    };
    assert_eq!(
        HostPort::of_pod(&p),
        [port("0.0.0.0", "UDP", 2), port("10.0.0.1", "TCP", 8080)]
    );
    let any = port("0.0.0.0", "TCP", 80);
    assert!(
        any.conflicts(&port("10.0.0.1", "TCP", 80)),
        "0.0.0.0 takes all"
    );
    assert!(port("10.0.0.1", "TCP", 80).conflicts(&any));
    assert!(port("10.0.0.1", "TCP", 80).conflicts(&port("10.0.0.1", "TCP", 80)));
    assert!(!port("10.0.0.1", "TCP", 80).conflicts(&port("10.0.0.2", "TCP", 80)));
    assert!(
        !any.conflicts(&port("0.0.0.0", "UDP", 80)),
        "another protocol"
    );
    assert!(!any.conflicts(&port("0.0.0.0", "TCP", 81)));
}

fn usage(cpu_millis: u64, memory_bytes: u64, ports: &[i32]) -> Usage {
    Usage {
        requests: Requests {
            cpu_millis,
            memory_bytes,
            ephemeral_storage_bytes: 0,
        },
        host_ports: ports
            .iter()
            .map(|&port| HostPort {
                ip: ANY_IP.into(),
                protocol: "TCP".into(),
                port,
            })
            .collect(),
    }
}

#[test]
fn a_pod_fits_while_the_others_leave_enough() {
    let others = [usage(1000, GI, &[80]), usage(0, 0, &[])];
    assert_eq!(fit(&usage(1000, 3 * GI, &[81]), &others, &node()), None);
    assert_eq!(fit(&usage(0, 0, &[]), &others, &node()), None, "BestEffort");
}

#[test]
fn the_kubelets_reasons_and_messages() {
    let others = [usage(1500, GI, &[80]), usage(0, 0, &[])];
    assert_eq!(
        fit(&usage(600, 0, &[]), &others, &node()),
        Some((
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"
                .into()
        ))
    );
    assert_eq!(
        fit(&usage(0, 3 * GI + 1, &[]), &others, &node()),
        Some((
            "OutOfmemory",
            format!(
                "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                3 * GI + 1,
                GI,
                4 * GI
            )
        ))
    );
    let mut disk = usage(0, 0, &[]);
    disk.requests.ephemeral_storage_bytes = 11 * GI;
    assert_eq!(
        fit(&disk, &others, &node()).map(|r| r.0),
        Some("OutOfephemeral-storage")
    );
    assert_eq!(
        fit(&usage(0, 0, &[80]), &others, &node()),
        Some((
            "NodePorts",
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod \
             ports"
                .into()
        ))
    );
    let full = [usage(0, 0, &[]), usage(0, 0, &[]), usage(0, 0, &[])];
    assert_eq!(
        fit(&usage(0, 0, &[]), &full, &node()),
        Some((
            "OutOfpods",
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3".into()
        ))
    );
}

#[test]
fn resources_are_reported_before_ports_as_the_kubelet_orders_them() {
    let others = [usage(2000, 0, &[80])];
    assert_eq!(
        fit(&usage(1, 0, &[80]), &others, &node()).map(|r| r.0),
        Some("OutOfcpu")
    );
}

#[test]
fn a_sidecar_started_before_an_init_container_adds_to_its_peak() {
    let p = pod(json!({
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "big", "resources": requesting("2", "1Mi")},
        ],
        "containers": [
            {"name": "a", "resources": requesting("300m", "2Mi")},
            {"name": "b", "resources": {"requests": {"memory": "3Mi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }));
    // cpu: max(300 + 100, 2000 + 100) + 10; memory: max(2 + 3 Mi, 1 Mi).
    let r = Requests::of_pod(&p);
    assert_eq!((r.cpu_millis, r.memory_bytes), (2110, 5 << 20));
}

#[test]
fn a_resize_is_infeasible_alone_else_deferred_with_the_fits_message() {
    let others = [usage(1500, 0, &[80])];
    assert_eq!(fit_resize(&usage(500, 1, &[80]), [], &node()), Ok(()));
    assert_eq!(
        fit_resize(&usage(600, 1, &[]), &others, &node()),
        Err(Insufficient {
            pending: Pending::Deferred,
            message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, \
                      capacity: 2000"
                .into(),
        })
    );
    assert_eq!(
        fit_resize(&usage(100, 5 * GI, &[]), &others, &node()),
        Err(Insufficient {
            pending: Pending::Infeasible,
            message: format!(
                "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                5 * GI,
                4 * GI
            ),
        })
    );
    assert_eq!(
        fit_resize(&usage(0, 0, &[80]), &others, &node()).map_err(|e| e.pending),
        Err(Pending::Deferred),
        "every failure of the fit defers (kubelet: the status manager)"
    );
}
