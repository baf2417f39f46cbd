use super::*;
use serde_json::json;

fn names() -> ClusterNames {
    let services: Vec<Service> = serde_json::from_value(json!([
        { "metadata": { "name": "web", "namespace": "shop" },
          "spec": { "clusterIP": "10.96.0.20", "ports": [{ "name": "http", "port": 80 }] } },
        { "metadata": { "name": "db", "namespace": "shop" },
          "spec": { "clusterIP": "None", "ports": [{ "name": "pg", "port": 5432 }] } },
        { "metadata": { "name": "ext", "namespace": "shop" },
          "spec": { "type": "ExternalName", "externalName": "Example.COM." } },
    ]))
    .expect("services");
    let slices: Vec<EndpointSlice> = serde_json::from_value(json!([
        { "metadata": { "name": "db-1", "namespace": "shop",
            "labels": { SERVICE_NAME_LABEL: "db" } },
          "addressType": "IPv4",
          "endpoints": [
            { "addresses": ["10.244.1.5"], "hostname": "db-0", "conditions": { "ready": true } },
            { "addresses": ["10.244.2.6"], "conditions": { "ready": true } },
            { "addresses": ["10.244.2.7"], "conditions": { "ready": false } } ] },
    ]))
    .expect("slices");
    ClusterNames::build(DEFAULT_ZONE, &services, &slices)
}

fn a(ip: [u8; 4]) -> Record {
    Record::A(Ipv4Addr::from(ip))
}

#[test]
fn services_resolve_as_coredns_answers_them() {
    let n = names();
    assert_eq!(
        n.answer("web.shop.svc.cluster.local.", QueryType::A),
        Answer::Records(vec![a([10, 96, 0, 20])])
    );
    assert_eq!(
        n.answer("WEB.shop.svc.Cluster.Local", QueryType::A),
        Answer::Records(vec![a([10, 96, 0, 20])]),
        "case does not matter"
    );
    assert_eq!(
        n.answer("web.shop.svc.cluster.local", QueryType::Aaaa),
        Answer::NoData
    );
    assert_eq!(
        n.answer("_http._tcp.web.shop.svc.cluster.local", QueryType::Srv),
        Answer::Records(vec![Record::Srv {
            port: 80,
            target: "web.shop.svc.cluster.local".into()
        }])
    );
    assert_eq!(
        n.answer("nope.shop.svc.cluster.local", QueryType::A),
        Answer::NxDomain
    );
    assert_eq!(n.answer("example.org", QueryType::A), Answer::NotOurs);
}

#[test]
fn headless_services_resolve_to_their_ready_endpoints() {
    let n = names();
    assert_eq!(
        n.answer("db.shop.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 244, 1, 5]), a([10, 244, 2, 6])])
    );
    assert_eq!(
        n.answer("db-0.db.shop.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 244, 1, 5])])
    );
    assert_eq!(
        n.answer("10-244-2-6.db.shop.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 244, 2, 6])])
    );
    let srv = n.answer("_pg._tcp.db.shop.svc.cluster.local", QueryType::Srv);
    assert_eq!(
        srv,
        Answer::Records(vec![
            Record::Srv {
                port: 5432,
                target: "db-0.db.shop.svc.cluster.local".into()
            },
            Record::Srv {
                port: 5432,
                target: "10-244-2-6.db.shop.svc.cluster.local".into()
            },
        ])
    );
}

#[test]
fn external_names_and_pods() {
    let n = names();
    assert_eq!(
        n.answer("ext.shop.svc.cluster.local", QueryType::A),
        Answer::Records(vec![Record::Cname("example.com".into())])
    );
    assert_eq!(
        n.answer("10-244-3-9.shop.pod.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 244, 3, 9])])
    );
    assert_eq!(
        n.answer("banana.shop.pod.cluster.local", QueryType::A),
        Answer::NxDomain
    );
    assert_eq!(
        n.answer("shop.svc.cluster.local", QueryType::A),
        Answer::NoData
    );
}

#[test]
fn cluster_ips_and_headless_endpoints_have_pointers() {
    let n = names();
    assert_eq!(
        n.answer("20.0.96.10.in-addr.arpa.", QueryType::Ptr),
        Answer::Records(vec![Record::Ptr("web.shop.svc.cluster.local".into())])
    );
    assert_eq!(
        n.answer("5.1.244.10.in-addr.arpa", QueryType::Ptr),
        Answer::Records(vec![Record::Ptr("db-0.db.shop.svc.cluster.local".into())])
    );
    assert_eq!(
        n.answer("6.2.244.10.in-addr.arpa", QueryType::Ptr),
        Answer::Records(vec![Record::Ptr(
            "10-244-2-6.db.shop.svc.cluster.local".into()
        )])
    );
    assert_eq!(
        n.answer("20.0.96.10.in-addr.arpa", QueryType::A),
        Answer::NoData
    );
    // Not-ready endpoints, unknown addresses and partial names fall through to the node's
    // resolver, as CoreDNS's `fallthrough in-addr.arpa`.
    for name in [
        "7.2.244.10.in-addr.arpa",
        "1.1.168.192.in-addr.arpa",
        "96.10.in-addr.arpa",
    ] {
        assert_eq!(n.answer(name, QueryType::Ptr), Answer::NotOurs, "{name}");
    }
}
