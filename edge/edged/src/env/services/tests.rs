//! The kubelet's service variables: names, ports, protocols, IPv6 and which services count.

use serde_json::json;

use super::*;

fn service(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "clusterIP": ip, "ports": ports },
    }))
    .expect("service")
}

fn vars(services: &[Service]) -> Vec<String> {
    from_services(services)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

#[test]
fn one_port_as_the_conformance_spec_expects() {
    let s = service(
        "ns",
        "fooservice",
        "10.96.0.42",
        json!([{"port": 8765, "targetPort": 8080}]),
    );
    assert_eq!(
        vars(&[s]),
        [
            "FOOSERVICE_SERVICE_HOST=10.96.0.42",
            "FOOSERVICE_SERVICE_PORT=8765",
            "FOOSERVICE_PORT=tcp://10.96.0.42:8765",
            "FOOSERVICE_PORT_8765_TCP=tcp://10.96.0.42:8765",
            "FOOSERVICE_PORT_8765_TCP_PROTO=tcp",
            "FOOSERVICE_PORT_8765_TCP_PORT=8765",
            "FOOSERVICE_PORT_8765_TCP_ADDR=10.96.0.42",
        ]
    );
}

#[test]
fn named_and_multiple_ports_with_protocols() {
    let s = service(
        "ns",
        "redis-master",
        "10.0.0.11",
        json!([{"name": "", "port": 6379},
               {"name": "metrics-port", "port": 9121, "protocol": "UDP"},
               {"name": "sctp", "port": 7, "protocol": "SCTP"}]),
    );
    assert_eq!(
        vars(&[s]),
        [
            "REDIS_MASTER_SERVICE_HOST=10.0.0.11",
            "REDIS_MASTER_SERVICE_PORT=6379",
            "REDIS_MASTER_SERVICE_PORT_METRICS_PORT=9121",
            "REDIS_MASTER_SERVICE_PORT_SCTP=7",
            "REDIS_MASTER_PORT=tcp://10.0.0.11:6379",
            "REDIS_MASTER_PORT_6379_TCP=tcp://10.0.0.11:6379",
            "REDIS_MASTER_PORT_6379_TCP_PROTO=tcp",
            "REDIS_MASTER_PORT_6379_TCP_PORT=6379",
            "REDIS_MASTER_PORT_6379_TCP_ADDR=10.0.0.11",
            "REDIS_MASTER_PORT_9121_UDP=udp://10.0.0.11:9121",
            "REDIS_MASTER_PORT_9121_UDP_PROTO=udp",
            "REDIS_MASTER_PORT_9121_UDP_PORT=9121",
            "REDIS_MASTER_PORT_9121_UDP_ADDR=10.0.0.11",
            "REDIS_MASTER_PORT_7_SCTP=sctp://10.0.0.11:7",
            "REDIS_MASTER_PORT_7_SCTP_PROTO=sctp",
            "REDIS_MASTER_PORT_7_SCTP_PORT=7",
            "REDIS_MASTER_PORT_7_SCTP_ADDR=10.0.0.11",
        ]
    );
}

#[test]
fn ipv6_is_bracketed_only_in_urls() {
    let s = service("ns", "v6", "fd00::a", json!([{"name": "http", "port": 80}]));
    assert_eq!(
        vars(&[s]),
        [
            "V6_SERVICE_HOST=fd00::a",
            "V6_SERVICE_PORT=80",
            "V6_SERVICE_PORT_HTTP=80",
            "V6_PORT=tcp://[fd00::a]:80",
            "V6_PORT_80_TCP=tcp://[fd00::a]:80",
            "V6_PORT_80_TCP_PROTO=tcp",
            "V6_PORT_80_TCP_PORT=80",
            "V6_PORT_80_TCP_ADDR=fd00::a",
        ]
    );
}

#[test]
fn services_without_a_cluster_ip_are_skipped() {
    let headless = service("ns", "headless", "None", json!([{"port": 80}]));
    let external: Service = serde_json::from_value(json!({
        "metadata": { "name": "ext", "namespace": "ns" },
        "spec": { "type": "ExternalName", "externalName": "example.com" },
    }))
    .expect("service");
    let portless = service("ns", "odd", "10.0.0.3", json!([]));
    assert_eq!(
        vars(&[headless.clone(), external.clone(), portless]),
        ["ODD_SERVICE_HOST=10.0.0.3"]
    );
    let both = [headless, external];
    assert!(visible("ns", true, &[], &both).is_empty());
}

fn names(picked: &BTreeMap<&str, &Service>) -> Vec<String> {
    picked
        .values()
        .map(|s| {
            let m = &s.metadata;
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn master_service_always_namespace_services_with_links() {
    let port = json!([{"port": 443}]);
    let default = [
        service("default", "kubernetes", "10.96.0.1", port.clone()),
        service("default", "other", "10.96.0.2", port.clone()),
    ];
    let apps = [
        service("apps", "web", "10.96.0.3", port.clone()),
        service("apps", "db", "None", port.clone()),
        // Not of the namespace asked for: ignored.
        service("elsewhere", "stray", "10.96.0.9", port.clone()),
    ];
    assert_eq!(
        names(&visible("apps", true, &default, &apps)),
        ["default/kubernetes", "apps/web"]
    );
    // enableServiceLinks: false keeps the master service only.
    assert_eq!(
        names(&visible("apps", false, &default, &apps)),
        ["default/kubernetes"]
    );
    // A pod of `default` sees all of `default`.
    assert_eq!(
        names(&visible("default", true, &default, &default)),
        ["default/kubernetes", "default/other"]
    );
    assert_eq!(
        names(&visible("default", false, &default, &default)),
        ["default/kubernetes"]
    );
    // A service of the pod's namespace named like the master service replaces it, unless
    // links are off.
    let shadow = [service("apps", "kubernetes", "10.96.0.7", port)];
    assert_eq!(
        names(&visible("apps", true, &default, &shadow)),
        ["apps/kubernetes"]
    );
    assert_eq!(
        names(&visible("apps", false, &default, &shadow)),
        ["default/kubernetes"]
    );
}
