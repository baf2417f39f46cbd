//! The `/etc/resolv.conf` the kubelet gives a pod's containers (`pkg/kubelet/network/dns`):
//! by `dnsPolicy`, merged with `dnsConfig`.
//!
//! - `ClusterFirst` (the default): the cluster resolver, search
//!   `<ns>.svc.<domain> svc.<domain> <domain>` followed by the node's search domains,
//!   `options ndots:5`; for a hostNetwork pod it means `Default`;
//! - `ClusterFirstWithHostNet`: the cluster's, hostNetwork or not;
//! - `Default`: the node's own resolv.conf (nameservers, search, options);
//! - `None`: nothing but `dnsConfig`.
//!
//! `dnsConfig.nameservers` and `searches` are appended (without repeats) and its `options`
//! replace those of the same name. At most 3 nameservers and 32 search domains are kept, as
//! the kubelet's limits. Without a cluster resolver (the node has no pod network), the cluster
//! policies fall back to `Default`, as the kubelet's without `clusterDNS`.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
pub use verge_edge_net::resolv::ResolvConf;

/// Where containers see the file.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The kubelet's limit on nameservers.
pub const MAX_NAMESERVERS: usize = 3;

/// The kubelet's limit on search domains.
pub const MAX_SEARCHES: usize = 32;

/// The resolv.conf of `pod`: `node` is the node's own, `cluster` the cluster resolver's
/// address (none without a pod network), `domain` the cluster domain.
pub fn for_pod(
    pod: &Pod,
    node: &ResolvConf,
    cluster: Option<Ipv4Addr>,
    domain: &str,
) -> ResolvConf {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let wants_cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut conf = match (policy, wants_cluster.then_some(cluster).flatten()) {
        ("None", _) => ResolvConf::default(),
        (_, Some(resolver)) => {
            let mut searches = vec![
                format!("{ns}.svc.{domain}"),
                format!("svc.{domain}"),
                domain.to_owned(),
            ];
            searches.extend(node.searches.iter().cloned());
            ResolvConf {
                nameservers: vec![resolver.to_string()],
                searches,
                options: vec!["ndots:5".to_owned()],
            }
        }
        _ => node.clone(),
    };
    if let Some(config) = spec.and_then(|s| s.dns_config.as_ref()) {
        for ns in config.nameservers.iter().flatten() {
            if !conf.nameservers.contains(ns) {
                conf.nameservers.push(ns.clone());
            }
        }
        for search in config.searches.iter().flatten() {
            if !conf.searches.contains(search) {
                conf.searches.push(search.clone());
            }
        }
        for option in config.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            conf.options
                .retain(|o| o.split(':').next().unwrap_or_default() != name);
            conf.options.push(match &option.value {
                Some(value) => format!("{name}:{value}"),
                None => name,
            });
        }
    }
    conf.nameservers.truncate(MAX_NAMESERVERS);
    let mut seen = std::collections::BTreeSet::new();
    conf.searches.retain(|s| seen.insert(s.clone()));
    conf.searches.truncate(MAX_SEARCHES);
    conf
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "metadata": { "name": "p", "namespace": "shop" },
            "spec": spec }))
        .expect("pod")
    }

    fn node() -> ResolvConf {
        ResolvConf::parse("# host\nsearch corp.example\nnameserver 192.0.2.53\noptions rotate\n")
    }

    const RESOLVER: Option<Ipv4Addr> = Some(Ipv4Addr::new(10, 244, 3, 1));

    #[test]
    fn cluster_first_names_the_cluster_resolver_and_search_domains() {
        let conf = for_pod(&pod(json!({})), &node(), RESOLVER, "cluster.local");
        assert_eq!(
            conf.render(),
            "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example\n\
             nameserver 10.244.3.1\noptions ndots:5\n"
        );
    }

    #[test]
    fn host_network_default_and_none() {
        let host = pod(json!({ "hostNetwork": true }));
        assert_eq!(for_pod(&host, &node(), RESOLVER, "cluster.local"), node());
        let with_host_net =
            pod(json!({ "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet" }));
        let conf = for_pod(&with_host_net, &node(), RESOLVER, "cluster.local");
        assert_eq!(conf.nameservers, ["10.244.3.1"]);
        let default = pod(json!({ "dnsPolicy": "Default" }));
        assert_eq!(
            for_pod(&default, &node(), RESOLVER, "cluster.local"),
            node()
        );
        // No pod network: ClusterFirst falls back to the node's.
        assert_eq!(
            for_pod(&pod(json!({})), &node(), None, "cluster.local"),
            node()
        );
        let none = pod(json!({ "dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1"], "searches": ["resolv.conf.local"],
            "options": [{ "name": "ndots", "value": "2" }, { "name": "edns0" }] } }));
        assert_eq!(
            for_pod(&none, &node(), RESOLVER, "cluster.local").render(),
            "search resolv.conf.local\nnameserver 1.1.1.1\noptions ndots:2 edns0\n"
        );
    }

    #[test]
    fn dns_config_merges_and_limits_hold() {
        let p = pod(json!({ "dnsConfig": {
            "nameservers": ["10.244.3.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"],
            "searches": ["svc.cluster.local", "extra.example"],
            "options": [{ "name": "ndots", "value": "1" }] } }));
        let conf = for_pod(&p, &node(), RESOLVER, "cluster.local");
        assert_eq!(conf.nameservers, ["10.244.3.1", "192.0.2.1", "192.0.2.2"]);
        assert_eq!(
            conf.searches.last().map(String::as_str),
            Some("extra.example")
        );
        assert_eq!(conf.options, ["ndots:1"]);
    }
}
