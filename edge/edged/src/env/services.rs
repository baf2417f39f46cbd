//! The service environment variables the kubelet gives every container
//! (`getServiceEnvVarMap` and `envvars.FromServices`).
//!
//! Which services: the master service (`kubernetes` of namespace `default`) always, and
//! every service of the pod's namespace unless `spec.enableServiceLinks` is `false`; a
//! service of the pod's namespace named like a master service replaces it. Services without
//! a cluster IP (empty or `None`: headless, ExternalName) are skipped. Per service `NAME`
//! (upper-cased, `-` -> `_`), with `IP` its `spec.clusterIP` and `P` its first port:
//!
//! * `NAME_SERVICE_HOST=IP`, `NAME_SERVICE_PORT=P`, `NAME_SERVICE_PORT_<PORTNAME>=<port>` for
//!   every named port;
//! * Docker links: `NAME_PORT=<proto>://IP:P` for the first port, and for every port
//!   `NAME_PORT_<port>_<PROTO>=<proto>://IP:<port>` with `_PROTO`, `_PORT` and `_ADDR`
//!   (protocol default `TCP`; an IPv6 `IP` is bracketed in the URLs, as Go's
//!   `net.JoinHostPort`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};

/// The namespace of the master services (Kubernetes `metav1.NamespaceDefault`).
pub const MASTER_NAMESPACE: &str = "default";

/// The master services: exposed to every pod, even with `enableServiceLinks: false` (the
/// kubelet's `masterServices`).
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// Whether the pod wants the services of its namespace (`spec.enableServiceLinks`, which the
/// API server defaults to `true`).
pub fn service_links_enabled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true)
}

/// Kubernetes `IsServiceIPSet`: `spec.clusterIP` neither empty nor `None`.
fn has_cluster_ip(service: &Service) -> bool {
    let ip = cluster_ip(service);
    !ip.is_empty() && ip != "None"
}

fn cluster_ip(service: &Service) -> &str {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or_default()
}

fn in_namespace<'a>(services: &'a [Service], ns: &str) -> impl Iterator<Item = &'a Service> {
    services
        .iter()
        .filter(move |s| s.metadata.namespace.as_deref() == Some(ns) && has_cluster_ip(s))
}

/// The services a container of a pod in `namespace` gets variables for, by name, as the
/// kubelet's `getServiceEnvVarMap` picks them: the master services of `default_services`
/// (the services of `default`), then, when `links` is set, every service of
/// `namespace_services` (those of `namespace`), replacing a master service of the same name.
pub fn visible<'a>(
    namespace: &str,
    links: bool,
    default_services: &'a [Service],
    namespace_services: &'a [Service],
) -> BTreeMap<&'a str, &'a Service> {
    let mut picked = BTreeMap::new();
    for s in in_namespace(default_services, MASTER_NAMESPACE) {
        let name = s.metadata.name.as_deref().unwrap_or_default();
        if MASTER_SERVICES.contains(&name) {
            picked.insert(name, s);
        }
    }
    if links {
        for s in in_namespace(namespace_services, namespace) {
            picked.insert(s.metadata.name.as_deref().unwrap_or_default(), s);
        }
    }
    picked
}

/// Kubernetes `envvars.FromServices`: the variables of `services`, in order, each service's
/// as the module documentation lists them. Services without a cluster IP are skipped; a
/// service without ports (invalid in the API) gets only `NAME_SERVICE_HOST`.
pub fn from_services<'a>(services: impl IntoIterator<Item = &'a Service>) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for service in services.into_iter().filter(|s| has_cluster_ip(s)) {
        let prefix = var_name(service.metadata.name.as_deref().unwrap_or_default());
        let ip = cluster_ip(service);
        vars.push((format!("{prefix}_SERVICE_HOST"), ip.to_owned()));
        let ports = service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or_default();
        let Some(first) = ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        vars.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                vars.push((format!("{port_var}_{}", var_name(name)), p.port.to_string()));
            }
        }
        for (i, p) in ports.iter().enumerate() {
            let protocol = p.protocol.as_deref().filter(|p| !p.is_empty());
            let protocol = protocol.unwrap_or("TCP");
            let (lower, upper) = (protocol.to_lowercase(), protocol.to_uppercase());
            let url = format!("{lower}://{}", join_host_port(ip, p.port));
            if i == 0 {
                // Docker names the first port's URL `NAME_PORT`.
                vars.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{upper}", p.port);
            vars.push((port_prefix.clone(), url));
            vars.push((format!("{port_prefix}_PROTO"), lower));
            vars.push((format!("{port_prefix}_PORT"), p.port.to_string()));
            vars.push((format!("{port_prefix}_ADDR"), ip.to_owned()));
        }
    }
    vars
}

/// Kubernetes `makeEnvVariableName`: upper case, `-` -> `_`.
fn var_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// Go's `net.JoinHostPort`: `host:port`, with a host containing `:` (IPv6) in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests;
