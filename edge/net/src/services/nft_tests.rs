use std::net::Ipv4Addr;

use super::*;
use crate::services::model::{Backend, Protocol, ServicePort};

fn scope() -> Scope {
    Scope {
        table: "verge-vg00000001".into(),
        bridge: Some("vg00000001".into()),
        node_ip: Some(Ipv4Addr::new(192, 0, 2, 10)),
        tunnel: None,
    }
}

fn port(name: &str, backends: &[(u8, u16)]) -> ServicePort {
    ServicePort {
        name: name.into(),
        namespace: "a".into(),
        service: "b".into(),
        protocol: Protocol::Tcp,
        cluster_ips: vec![Ipv4Addr::new(10, 96, 0, 20)],
        port: 80,
        node_port: Some(30080),
        backends: backends
            .iter()
            .map(|(last, port)| Backend {
                ip: Ipv4Addr::new(10, 244, 1, *last),
                port: *port,
            })
            .collect(),
        remote: Vec::new(),
        affinity_seconds: None,
    }
}

#[test]
fn the_script_replaces_the_table_and_spreads_over_backends() {
    let script = render(&scope(), &[port("a/b:http/tcp", &[(5, 8080), (6, 8080)])]);
    assert!(script.starts_with(
        "table ip verge-vg00000001 {}\ndelete table ip verge-vg00000001\ntable ip verge-vg00000001 {"
    ));
    assert!(
        script.contains("10.96.0.20 . tcp . 80 : goto svc-0"),
        "{script}"
    );
    assert!(script.contains("tcp . 30080 : goto svc-0"), "{script}");
    assert!(script.contains(
        "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.1.5 . 8080, 1 : 10.244.1.6 . 8080 }"
    ), "{script}");
    assert!(script.contains("elements = { 10.244.1.5 . 10.244.1.5, 10.244.1.6 . 10.244.1.6 }"));
    assert!(script.contains("ct status dnat ip saddr . ip daddr @hairpin masquerade"));
    assert!(script.contains("iifname \"vg00000001\" jump services"));
    assert!(script.contains("ip daddr 192.0.2.10 jump nodeports"));
    // Any other port of a cluster IP is refused (served ones were DNATed before).
    assert!(
        script.contains("set cluster-ips {\n    type ipv4_addr\n    elements = { 10.96.0.20 }"),
        "{script}"
    );
    assert!(script.contains("ip daddr @cluster-ips goto reject-closed"));
}

#[test]
fn a_port_without_backends_is_refused_and_affinity_has_sets() {
    let mut sticky = port("a/s:80/tcp", &[(5, 80)]);
    sticky.affinity_seconds = Some(600);
    let script = render(&scope(), &[port("a/b:http/tcp", &[]), sticky]);
    assert!(script.contains("set no-endpoints {"), "{script}");
    assert!(
        script.contains("elements = { 10.96.0.20 . tcp . 80 }"),
        "{script}"
    );
    assert!(!script.contains("chain svc-0 "), "{script}");
    assert!(script.contains("set affinity-1-0 {"));
    assert!(script.contains("timeout 600s"));
    assert!(script.contains("ip saddr @affinity-1-0 goto ep-1-0"));
    assert!(script.contains("update @affinity-1-0 { ip saddr }"));
    assert!(
        script.contains("meta l4proto tcp dnat ip to 10.244.1.5:80"),
        "{script}"
    );
}

#[test]
fn remote_endpoints_go_to_the_tunnel_while_it_is_up() {
    let mut p = port("a/b:http/tcp", &[(5, 8080)]);
    p.remote = vec![
        Backend {
            ip: Ipv4Addr::new(10, 244, 9, 1),
            port: 8080,
        },
        Backend {
            ip: Ipv4Addr::new(10, 244, 9, 2),
            port: 8080,
        },
    ];
    let offline = render(&scope(), std::slice::from_ref(&p));
    assert!(offline.contains("dnat ip to 10.244.1.5:8080"), "{offline}");
    let mut online = scope();
    online.tunnel = Some("10.244.1.1:15001".parse().expect("address"));
    let script = render(&online, std::slice::from_ref(&p));
    assert!(script.contains(
        "numgen random mod 3 map { 0 : 10.244.1.5 . 8080, 1 : 10.244.1.1 . 15001, 2 : 10.244.1.1 . 15001 }"
    ), "{script}");
    // Only remote endpoints: offline the port is refused, online it goes to the tunnel.
    p.backends.clear();
    assert!(
        render(&scope(), std::slice::from_ref(&p)).contains("elements = { 10.96.0.20 . tcp . 80 }")
    );
    let mut udp = p.clone();
    udp.protocol = Protocol::Udp;
    let script = render(&online, &[p, udp]);
    assert!(
        script.contains("10.96.0.20 . tcp . 80 : goto svc-0"),
        "{script}"
    );
    assert!(
        script.contains("elements = { 10.96.0.20 . udp . 80 }"),
        "UDP is not tunnelled: {script}"
    );
}
