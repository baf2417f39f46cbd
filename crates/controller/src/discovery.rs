//! cloudhub replicas discovered through the Kubernetes API rather than cluster DNS: the
//! `discovery.k8s.io/v1` EndpointSlices of a Service (label `kubernetes.io/service-name`),
//! as kube-proxy reads them. Each ready endpoint is one replica to attach to.

use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::{Error, Result};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service named `<namespace>/<name>` (`cloudhubService`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceRef {
    /// Parses `<namespace>/<service>`.
    ///
    /// # Errors
    /// [`Error::Discovery`] when either part is missing or there are more than two.
    pub fn parse(text: &str) -> Result<Self> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(Error::Discovery(text.to_owned())),
        }
    }

    /// The Service's in-cluster DNS name, `<name>.<namespace>.svc`: the name its replicas'
    /// certificates are verified for.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }

    /// The label selector of its EndpointSlices.
    pub fn slice_selector(&self) -> String {
        format!("{SERVICE_NAME_LABEL}={}", self.name)
    }
}

/// The endpoint URIs `https://<address>:<port>` of `slices`, sorted, without duplicates:
/// for every slice of address type `IPv4` or `IPv6` that has a port named `port_name`, the
/// first address of every endpoint whose `conditions.ready` is not `false` (the addresses of
/// one endpoint are the same pod; an unknown readiness counts as ready, as the
/// EndpointSlice API says consumers should).
pub fn ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port_name: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
            continue;
        }
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port);
        let Some(port) = port else { continue };
        for endpoint in slice.endpoints.iter().flatten() {
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
            if ready == Some(false) {
                continue;
            }
            let Some(address) = endpoint.addresses.first() else {
                continue;
            };
            if let Ok(ip) = address.parse::<IpAddr>() {
                out.push(match ip {
                    IpAddr::V4(v4) => format!("https://{v4}:{port}"),
                    IpAddr::V6(v6) => format!("https://[{v6}]:{port}"),
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_refs() {
        let s = ServiceRef::parse("verge-system/cloudhub-controllers").expect("ok");
        assert_eq!(s.server_name(), "cloudhub-controllers.verge-system.svc");
        assert_eq!(
            s.slice_selector(),
            "kubernetes.io/service-name=cloudhub-controllers"
        );
        for bad in ["hubs", "/hubs", "ns/", "a/b/c", ""] {
            assert!(
                matches!(ServiceRef::parse(bad), Err(Error::Discovery(_))),
                "{bad}"
            );
        }
    }

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).expect("slice")
    }

    #[test]
    fn ready_endpoints_of_the_named_port() {
        let v4 = slice(json!({
            "metadata": { "name": "a" }, "addressType": "IPv4",
            "ports": [{ "name": "edge", "port": 10000 }, { "name": "controllerhub", "port": 10001 }],
            "endpoints": [
                { "addresses": ["10.0.0.2", "10.0.0.9"], "conditions": { "ready": true } },
                { "addresses": ["10.0.0.3"] },
                { "addresses": ["10.0.0.4"], "conditions": { "ready": false, "terminating": true } },
                { "addresses": ["10.0.0.2"] }
            ]
        }));
        let v6 = slice(json!({
            "metadata": { "name": "b" }, "addressType": "IPv6",
            "ports": [{ "name": "controllerhub", "port": 10001 }],
            "endpoints": [{ "addresses": ["fd00::1"], "conditions": { "ready": true } }]
        }));
        let other_port = slice(json!({
            "metadata": { "name": "c" }, "addressType": "IPv4",
            "ports": [{ "name": "edge", "port": 10000 }],
            "endpoints": [{ "addresses": ["10.0.0.7"] }]
        }));
        let fqdn = slice(json!({
            "metadata": { "name": "d" }, "addressType": "FQDN",
            "ports": [{ "name": "controllerhub", "port": 10001 }],
            "endpoints": [{ "addresses": ["hub.example"] }]
        }));
        assert_eq!(
            ready_endpoints([&v4, &v6, &other_port, &fqdn], "controllerhub"),
            [
                "https://10.0.0.2:10001",
                "https://10.0.0.3:10001",
                "https://[fd00::1]:10001"
            ]
        );
        assert!(ready_endpoints([&v4], "nope").is_empty());
    }
}
