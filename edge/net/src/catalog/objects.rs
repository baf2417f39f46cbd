//! The parts of Services and EndpointSlices the Service proxy and the resolver read, parsed
//! with serde straight from the stored JSON: the same field names and shapes as
//! `k8s_openapi`'s `core/v1 Service` and `discovery/v1 EndpointSlice` (so the plan reads them
//! as it would the full objects), every other field skipped (managed fields, status, target
//! references, hints). A node holding a thousand Services keeps a few hundred bytes of each.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Deserializer};

/// The metadata read: name, namespace, labels, and of the annotations only KubeEdge's
/// service topology (others, e.g. kubectl's last-applied configuration, are skipped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ObjectMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
    /// The value of the annotation `apps.kubeedge.io/service-topology`.
    #[serde(default, rename = "annotations", deserialize_with = "service_topology")]
    pub service_topology: Option<String>,
}

/// The annotation `apps.kubeedge.io/service-topology` of an annotations map; the other
/// values are skipped without being kept.
fn service_topology<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    struct Topology;
    impl<'de> serde::de::Visitor<'de> for Topology {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an annotations map")
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == verge_core::well_known::SERVICE_TOPOLOGY_ANNOTATION {
                    found = Some(map.next_value::<String>()?);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    deserializer.deserialize_any(Topology)
}

/// A `core/v1 Service`: metadata and spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Service {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its spec.
    pub spec: Option<ServiceSpec>,
}

/// The Service spec fields the plan and the zone read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `type`: `ClusterIP` (unset), `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// `clusterIP` (`None` for a headless Service).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// `clusterIPs`.
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Option<Vec<String>>,
    /// `externalName`.
    pub external_name: Option<String>,
    /// `publishNotReadyAddresses`.
    pub publish_not_ready_addresses: Option<bool>,
    /// `sessionAffinity`: `None` or `ClientIP`.
    pub session_affinity: Option<String>,
    /// `sessionAffinityConfig`.
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `internalTrafficPolicy`: `Cluster` or `Local`.
    pub internal_traffic_policy: Option<String>,
    /// `trafficDistribution`.
    pub traffic_distribution: Option<String>,
    /// `ports`.
    pub ports: Option<Vec<ServicePort>>,
}

/// `sessionAffinityConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SessionAffinityConfig {
    /// `clientIP`.
    #[serde(rename = "clientIP")]
    pub client_ip: Option<ClientIpConfig>,
}

/// `sessionAffinityConfig.clientIP`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpConfig {
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i32>,
}

/// One of a Service's `ports`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// `name` (required when there are several).
    pub name: Option<String>,
    /// `protocol` (`TCP` when unset).
    pub protocol: Option<String>,
    /// `port`.
    pub port: i32,
    /// `nodePort`.
    pub node_port: Option<i32>,
}

/// A `discovery/v1 EndpointSlice`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    /// Its metadata (the label `kubernetes.io/service-name` names its Service).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `addressType`: `IPv4`, `IPv6` or `FQDN`.
    #[serde(default)]
    pub address_type: String,
    /// `endpoints`.
    pub endpoints: Option<Vec<Endpoint>>,
    /// `ports`.
    pub ports: Option<Vec<EndpointPort>>,
}

/// One of a slice's `endpoints`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `addresses` that are IPv4 addresses (the proxy and the resolver serve IPv4 slices
    /// only; any other address is dropped here).
    #[serde(default, deserialize_with = "ipv4_addresses")]
    pub addresses: Vec<Ipv4Addr>,
    /// `conditions`.
    pub conditions: Option<EndpointConditions>,
    /// `hostname`.
    pub hostname: Option<String>,
    /// `nodeName`.
    pub node_name: Option<String>,
    /// `zone`.
    pub zone: Option<String>,
}

/// An endpoint's `conditions` (unset `ready` counts as ready).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct EndpointConditions {
    /// `ready`.
    pub ready: Option<bool>,
    /// `serving`.
    pub serving: Option<bool>,
    /// `terminating`.
    pub terminating: Option<bool>,
}

/// One of a slice's `ports`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct EndpointPort {
    /// `name` (matches the Service port's).
    pub name: Option<String>,
    /// `port`: the endpoints' port.
    pub port: Option<i32>,
    /// `protocol`.
    pub protocol: Option<String>,
}

/// The IPv4 addresses among a list of address strings.
fn ipv4_addresses<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Ipv4Addr>, D::Error> {
    let addresses: Vec<String> = Vec::deserialize(deserializer)?;
    Ok(addresses.iter().filter_map(|a| a.parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_objects_parse_and_the_rest_is_skipped() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "web", "namespace": "shop", "uid": "u",
                "managedFields": [{ "manager": "kubectl" }],
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "apps.kubeedge.io/service-topology": "range-nodegroup" } },
            "spec": { "type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 60 } },
                "ports": [{ "name": "http", "port": 80, "targetPort": "web", "nodePort": 30080 }] },
            "status": { "loadBalancer": {} },
        }))
        .expect("service");
        assert_eq!(
            svc.metadata.service_topology.as_deref(),
            Some("range-nodegroup")
        );
        let spec = svc.spec.expect("spec");
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.20"));
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(
            spec.session_affinity_config
                .and_then(|c| c.client_ip)
                .and_then(|c| c.timeout_seconds),
            Some(60)
        );
        assert_eq!(spec.ports.expect("ports")[0].node_port, Some(30080));
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web-1", "namespace": "shop",
                "labels": { "kubernetes.io/service-name": "web" } },
            "addressType": "IPv4",
            "endpoints": [{ "addresses": ["10.244.1.5"], "nodeName": "edge-a",
                "conditions": { "ready": true }, "targetRef": { "kind": "Pod", "name": "p" } }],
            "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        }))
        .expect("slice");
        let endpoints = slice.endpoints.expect("endpoints");
        assert_eq!(endpoints[0].node_name.as_deref(), Some("edge-a"));
        assert_eq!(endpoints[0].conditions.and_then(|c| c.ready), Some(true));
        assert_eq!(endpoints[0].addresses, [Ipv4Addr::new(10, 244, 1, 5)]);
    }
}
