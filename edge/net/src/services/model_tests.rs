use super::*;
use serde_json::json;

fn service(spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "shop" }, "spec": spec
    }))
    .expect("service")
}

fn slice(endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": { "name": "web-1", "namespace": "shop",
            "labels": { SERVICE_NAME_LABEL: "web" } },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": endpoints,
    }))
    .expect("slice")
}

fn ctx() -> NodeContext {
    NodeContext {
        node: "edge-a".into(),
        node_ip: Some(Ipv4Addr::new(192, 0, 2, 10)),
        zone: Some("site-1".into()),
        group: None,
        direct: vec![
            "10.244.1.0/24".parse().expect("cidr"),
            "10.244.2.0/24".parse().expect("cidr"),
        ],
    }
}

fn endpoint(ip: &str, node: &str, ready: bool) -> serde_json::Value {
    json!({ "addresses": [ip], "nodeName": node, "zone": "site-1",
        "conditions": { "ready": ready, "serving": ready, "terminating": false } })
}

fn ips(port: &ServicePort) -> Vec<String> {
    port.backends
        .iter()
        .map(|b| format!("{}:{}", b.ip, b.port))
        .collect()
}

#[test]
fn a_cluster_ip_service_goes_to_its_ready_reachable_endpoints() {
    let svc = service(
        json!({ "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
        "ports": [{ "name": "http", "port": 80, "targetPort": "web" }] }),
    );
    let eps = slice(json!([
        endpoint("10.244.1.5", "edge-a", true),
        endpoint("10.244.2.7", "edge-b", true),
        endpoint("10.244.1.6", "edge-a", false),
        endpoint("10.244.9.9", "cloud-0", true),
    ]));
    let plan = plan(&[svc], &[eps], &ctx());
    assert_eq!(plan.len(), 1);
    let port = &plan[0];
    assert_eq!(port.name, "shop/web:http/tcp");
    assert_eq!(port.cluster_ips, [Ipv4Addr::new(10, 96, 0, 20)]);
    assert_eq!(
        (port.port, port.protocol, port.node_port),
        (80, Protocol::Tcp, None)
    );
    // Not ready: left out; 10.244.9.9 is not reached directly: through cloudhub.
    assert_eq!(ips(port), ["10.244.1.5:8080", "10.244.2.7:8080"]);
    assert_eq!(
        port.remote,
        [Backend {
            ip: Ipv4Addr::new(10, 244, 9, 9),
            port: 8080
        }]
    );
    assert_eq!(
        (port.namespace.as_str(), port.service.as_str()),
        ("shop", "web")
    );
}

#[test]
fn the_node_address_is_direct_only_for_an_endpoint_of_this_node() {
    let svc = service(json!({ "clusterIP": "10.96.0.1",
        "ports": [{ "name": "http", "port": 443 }] }));
    let host = |node: Option<&str>| {
        json!([{ "addresses": ["192.0.2.10"], "nodeName": node,
            "conditions": { "ready": true } }])
    };
    let mine = plan(
        std::slice::from_ref(&svc),
        &[slice(host(Some("edge-a")))],
        &ctx(),
    );
    assert_eq!(ips(&mine[0]), ["192.0.2.10:8080"]);
    assert!(mine[0].remote.is_empty());
    // The same address without this node's name (e.g. the API server on this host): remote.
    let theirs = plan(&[svc], &[slice(host(None))], &ctx());
    assert!(theirs[0].backends.is_empty());
    assert_eq!(theirs[0].remote.len(), 1);
}

#[test]
fn terminating_serving_endpoints_are_used_only_when_none_is_ready() {
    let svc = service(json!({ "clusterIP": "10.96.0.20",
        "ports": [{ "name": "http", "port": 80 }] }));
    let going = json!({ "addresses": ["10.244.1.9"], "nodeName": "edge-a",
        "conditions": { "ready": false, "serving": true, "terminating": true } });
    let plan1 = plan(
        std::slice::from_ref(&svc),
        &[slice(json!([going.clone()]))],
        &ctx(),
    );
    assert_eq!(ips(&plan1[0]), ["10.244.1.9:8080"]);
    let both = slice(json!([going, endpoint("10.244.1.5", "edge-a", true)]));
    assert_eq!(ips(&plan(&[svc], &[both], &ctx())[0]), ["10.244.1.5:8080"]);
}

#[test]
fn policies_affinity_and_node_ports() {
    let svc = service(json!({ "type": "NodePort", "clusterIP": "10.96.0.20",
        "internalTrafficPolicy": "Local", "sessionAffinity": "ClientIP",
        "ports": [{ "name": "http", "port": 80, "nodePort": 30080 }] }));
    let eps = slice(json!([
        endpoint("10.244.1.5", "edge-a", true),
        endpoint("10.244.2.7", "edge-b", true),
    ]));
    let plan = plan(&[svc], &[eps], &ctx());
    let port = &plan[0];
    assert_eq!(
        ips(port),
        ["10.244.1.5:8080"],
        "internalTrafficPolicy Local"
    );
    assert_eq!(port.node_port, Some(30080));
    assert_eq!(port.affinity_seconds, Some(DEFAULT_AFFINITY_SECONDS));
}

#[test]
fn prefer_same_node_keeps_local_endpoints_when_there_are_any() {
    let svc = service(
        json!({ "clusterIP": "10.96.0.20", "trafficDistribution": "PreferSameNode",
        "ports": [{ "name": "http", "port": 80 }] }),
    );
    let eps = slice(json!([
        endpoint("10.244.1.5", "edge-a", true),
        endpoint("10.244.2.7", "edge-b", true),
    ]));
    assert_eq!(
        ips(&plan(std::slice::from_ref(&svc), &[eps], &ctx())[0]),
        ["10.244.1.5:8080"]
    );
    let remote = slice(json!([endpoint("10.244.2.7", "edge-b", true)]));
    assert_eq!(
        ips(&plan(&[svc], &[remote], &ctx())[0]),
        ["10.244.2.7:8080"]
    );
}

#[test]
fn headless_and_external_name_services_are_dns_only_and_no_endpoints_means_none() {
    let headless = service(json!({ "clusterIP": "None", "ports": [{ "port": 80 }] }));
    let external = service(json!({ "type": "ExternalName", "externalName": "example.com" }));
    assert!(plan(&[headless, external], &[], &ctx()).is_empty());
    let lonely =
        service(json!({ "clusterIP": "10.96.0.21", "ports": [{ "port": 53, "protocol": "UDP" }] }));
    let plan = plan(&[lonely], &[], &ctx());
    assert_eq!(plan[0].name, "shop/web:53/udp");
    assert!(plan[0].backends.is_empty());
}

#[test]
fn the_kubernetes_services_https_port_is_served_locally() {
    let api: Service = serde_json::from_value(json!({
        "metadata": { "name": "kubernetes", "namespace": "default" },
        "spec": { "clusterIP": "10.96.0.1", "ports": [
            { "name": "https", "port": 443, "targetPort": 6443 },
            { "name": "other", "port": 8443 }] }
    }))
    .expect("service");
    let eps: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "kubernetes", "namespace": "default",
            "labels": { SERVICE_NAME_LABEL: "kubernetes" } },
        "addressType": "IPv4",
        "ports": [{ "name": "https", "port": 6443, "protocol": "TCP" }],
        "endpoints": [endpoint("192.0.2.1", "", true)],
    }))
    .expect("slice");
    let web = service(json!({ "clusterIP": "10.96.0.20", "ports": [{ "port": 443 }] }));
    let mut ports = plan(&[api, web], &[eps], &ctx());
    let before = ports.clone();
    assert_eq!(
        before
            .iter()
            .find(|p| p.service == "kubernetes" && p.port == 443)
            .map(|p| p.remote.len()),
        Some(1),
        "the API server is a remote endpoint"
    );
    let to = SocketAddrV4::new(Ipv4Addr::new(10, 244, 1, 1), 15443);
    serve_locally(&mut ports, ("default", "kubernetes"), to);
    let https = ports
        .iter()
        .find(|p| p.service == "kubernetes" && p.port == 443)
        .expect("https port");
    assert_eq!(ips(https), ["10.244.1.1:15443"]);
    assert!(https.remote.is_empty());
    let unchanged: Vec<_> = ports
        .iter()
        .filter(|p| !(p.service == "kubernetes" && p.port == 443))
        .collect();
    let expected: Vec<_> = before
        .iter()
        .filter(|p| !(p.service == "kubernetes" && p.port == 443))
        .collect();
    assert_eq!(
        unchanged, expected,
        "other ports and Services keep their endpoints"
    );
}

#[test]
fn a_range_nodegroup_service_keeps_a_groups_traffic_in_the_group() {
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "shop",
            "annotations": { "apps.kubeedge.io/service-topology": "range-nodegroup" } },
        "spec": { "clusterIP": "10.96.0.20", "ports": [{ "name": "http", "port": 80 }] },
    }))
    .expect("service");
    let eps = slice(json!([
        endpoint("10.244.1.5", "edge-a", true),
        endpoint("10.244.2.7", "edge-b", true),
        endpoint("10.244.9.9", "edge-c", true),
    ]));
    let grouped = NodeContext {
        group: Some(["edge-a".to_owned(), "edge-b".to_owned()].into()),
        ..ctx()
    };
    let plan_in = |ctx: &NodeContext| {
        let port = plan(std::slice::from_ref(&svc), std::slice::from_ref(&eps), ctx).remove(0);
        let mut all = ips(&port);
        all.extend(port.remote.iter().map(|b| format!("{}:{}", b.ip, b.port)));
        all
    };
    // edge-c is in another group (or none): left out.
    assert_eq!(plan_in(&grouped), ["10.244.1.5:8080", "10.244.2.7:8080"]);
    // A node of no group takes every endpoint, as does a Service without the annotation.
    assert_eq!(plan_in(&ctx()).len(), 3);
    let plain =
        service(json!({ "clusterIP": "10.96.0.20", "ports": [{ "name": "http", "port": 80 }] }));
    let port = plan(&[plain], &[eps], &grouped).remove(0);
    assert_eq!(port.backends.len() + port.remote.len(), 3);
}
